"""Decision data on disk and in memory.

- ``batch_files``: decision files: naming, batch writing, reading and scanning (record models: ``ml.game.record``).
- ``decisions``: records to training rows (observation, action mask, target).
- ``dataset``: the supervised dataset of the merged batches, with its holdout split by game.
- ``encoded_cache``: the encoded rows of a batch, cached by content hash.
- ``merge``: merging accepted batches with source weights.
"""
