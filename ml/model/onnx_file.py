"""ONNX export of a policy, so a client (Forge's JVM) runs it in-process with ONNX Runtime.

The graph takes the encoded decision and its legal actions and gives what ``PolicyNet`` gives:

============== ============================== ==========================================================
name           type                           meaning
============== ============================== ==========================================================
``obs``        float32[batch, obs_dim]        the encoded decision point (the feature layout in the sidecar;
                                              the commander's: ``RecordEncoder``, the compiled encoder
                                              of the policy endpoint and self-play)
``action_mask``bool[batch, num_actions]       true = legal; at least one per row
``probs``      float32[batch, num_actions]    softmax of the masked logits; illegal actions exactly 0
``value``      float32[batch]                 the acting seat's expected return
``logits``     float32[batch, num_actions]    masked logits (illegal: ``ml.model.policy.MASKED_LOGIT``)
============== ============================== ==========================================================

The greedy action is the arg-max of ``probs`` (or ``logits``), as ``PolicyNet.act(greedy=True)``.
``onnx`` and ``onnxruntime`` are the optional ``serve`` extra; they are imported on use.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ml.base.io import JSONObject, JSONValue, atomic_write_bytes, atomic_write_json
from ml.model.policy import MASKED_LOGIT, PolicyNet

OPSET = 17
"""ONNX opset of the export: ONNX Runtime 1.14+ (Java ``com.microsoft.onnxruntime:onnxruntime``) runs it."""
INPUT_NAMES = ("obs", "action_mask")
OUTPUT_NAMES = ("probs", "value", "logits")
SIDECAR_FORMAT = 1
"""Version of the sidecar JSON written beside the model (bumped on any change of its keys)."""
MASK_CONVENTION = (
    f"action_mask[b, a] is true when macro action a is legal at decision b; the graph sets the logits of illegal "
    f"actions to {MASKED_LOGIT:g}, so their probability is exactly 0. Each row needs at least one legal action. A "
    "record without an action_mask (real Forge data) is read as all actions legal by the train stage; to answer one, "
    "the policy endpoint allows every action except attack_opponent_k where seat (active_seat + k) % pod size is "
    "missing or out (ml.game.commander.encoding.record_legal_mask): build the mask the same way."
)


class _Exported(nn.Module):
    """``PolicyNet`` with the softmax inside the graph: ``(obs, action_mask) -> (probs, value, logits)``."""

    def __init__(self, net: PolicyNet) -> None:
        super().__init__()
        self.net = net

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits, value = self.net(obs, action_mask)
        return torch.softmax(logits, dim=-1), value, logits


def io_layout(net: PolicyNet) -> dict[str, list[JSONObject]]:
    """The inputs and outputs of the exported graph: name, dtype and shape (``batch`` is dynamic)."""
    a = net.num_actions
    return {
        "inputs": [
            {"name": "obs", "dtype": "float32", "shape": ["batch", net.obs_dim]},
            {"name": "action_mask", "dtype": "bool", "shape": ["batch", a]},
        ],
        "outputs": [
            {"name": "probs", "dtype": "float32", "shape": ["batch", a]},
            {"name": "value", "dtype": "float32", "shape": ["batch"]},
            {"name": "logits", "dtype": "float32", "shape": ["batch", a]},
        ],
    }


def write_onnx(net: PolicyNet, out: Path, sidecar: Mapping[str, JSONValue]) -> Path:
    """Write ``net`` as ONNX to ``out`` and the sidecar JSON beside it (``out`` with suffix ``.json``).

    Args:
        net: the policy (left in eval mode).
        out: the ``.onnx`` file (written atomically; folders created).
        sidecar: what the caller knows of the model and its game (``feature_names``, ``action_names``,
            provenance); the input/output layout, mask convention and opset are added here.

    Returns:
        The sidecar's path.

    Raises:
        ImportError: ``onnx`` is not installed (``pip install -e ".[serve]"``).
    """
    import onnx  # noqa: F401  (the legacy exporter needs it; fail early with a clear name)

    net.eval()
    example = (torch.zeros(2, net.obs_dim), torch.ones(2, net.num_actions, dtype=torch.bool))
    dynamic = {name: {0: "batch"} for name in (*INPUT_NAMES, *OUTPUT_NAMES)}
    buf = io.BytesIO()
    with warnings.catch_warnings():  # the TorchScript exporter is deprecated but needs no onnxscript
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Exported(net), example, buf,  # type: ignore[arg-type]  # the TorchScript exporter takes a file object
            input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES), dynamic_axes=dynamic, opset_version=OPSET,
            dynamo=False,
        )  # fmt: skip
    atomic_write_bytes(out, buf.getvalue())
    side = Path(out).with_suffix(".json")
    layout = io_layout(net)
    atomic_write_json(
        side,
        {"format": SIDECAR_FORMAT, "onnx": Path(out).name, "opset": OPSET, **layout, "mask_convention": MASK_CONVENTION,
         "greedy_action": "argmax of probs over the last axis", **sidecar},
    )  # fmt: skip
    return side


def run_onnx(path: Path, obs: np.ndarray, action_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run an exported policy with ONNX Runtime (CPU).

    Args:
        path: the ``.onnx`` file.
        obs: float32[B, obs_dim].
        action_mask: bool[B, num_actions].

    Returns:
        ``(probs float32[B, A], value float32[B], logits float32[B, A])``.
    """
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    probs, value, logits = session.run(list(OUTPUT_NAMES), {"obs": obs, "action_mask": action_mask})
    return probs, value, logits
