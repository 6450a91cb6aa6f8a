"""The policy network and its outside forms.

- ``policy``: ``PolicyNet`` (masked logits and a value head), its checkpoints.
- ``onnx_file``: the ONNX sidecar of a checkpoint.
- ``serving``: the micro-batched server behind the HTTP policy endpoint.
"""
