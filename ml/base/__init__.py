"""Infrastructure every other package stands on; imports nothing of the project.

- ``io``: atomic writes, JSON/JSONL reading with file:line errors (``DataFileError``).
- ``faults``: the named fault-injection seams the kill tests use.
- ``progress``: progress lines for long work, also when output goes to a file.
- ``determinism``: the CPU cap (thread counts, ``MKL_CBWR``) applied before torch or numpy load.
"""
