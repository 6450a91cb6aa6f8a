"""The folders the driver promotes from ``data/merged`` into ``data/``, and the guard on them.

``PROMOTED`` names the folders ``Loop.promote`` links from the last merge's output at the start
of an attempt; :func:`refuse_hand_made` stops the loop before it would delete, revert or record
a file that a user added to or edited in one of them (docs/design-notes.md, "Promotion happens
at the start of the next attempt").
"""

from __future__ import annotations

from pathlib import Path

from ml.data.merge import hand_made_changes
from ml.driver.workspace import LoopError

PROMOTED = ("pool", "rejected", "frozen", "students", "next_student")
TRACKED_INPUTS = (*PROMOTED, "seed", "forge")
"""DVC-tracked input folders created empty on a fresh clone (``seed`` holds a --seed-checkpoint)."""


def refuse_hand_made(root: Path) -> None:
    """Refuse files added to or edited in ``data/{pool,rejected,frozen,students}`` by hand
    (``ml.data.merge.hand_made_changes``): promotion would delete or revert them, and a stage
    would read them into the record. The driver checks before promotion and before every stage.

    Raises:
        LoopError: naming each such file and what to do; nothing is changed.
    """
    changes = hand_made_changes(root / "data/merged", root / "data", PROMOTED)
    if not changes:
        return
    listed = "\n  ".join(f"{p.relative_to(root)} ({how})" for p, how in changes)
    folders = " ".join(sorted({str(p.parent.relative_to(root)) for p, _ in changes}))
    raise LoopError(
        f"files added or edited by hand in the loop's data folders (they differ from the last merge, data/merged):\n"
        f"  {listed}\nthe loop would delete or revert them: move added files you want to keep out of data/, then "
        f"`dvc checkout --force {folders}` (it restores edited files and deletes added ones), then run again. Batches join the pool only through the gate; "
        "teacher data goes in with `python loop.py import-forge PATH`."
    )
