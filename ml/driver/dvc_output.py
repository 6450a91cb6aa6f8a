"""What ``loop.py`` shows of ``dvc repro``'s own output (``ml.driver.workspace.Workspace`` runs it).

``DvcOutputFilter`` leaves out DVC's hints, says its "is empty" warnings once per path, drops the
interpreter's shutdown noise and passes every other line as it came; ``stage_times`` reads each
stage's wall time from the timestamped lines.
"""

from __future__ import annotations

import re
from collections import deque

# DVC 3.x's advice after `dvc add` / `dvc repro` (text captured from DVC 3.67.1; tests/test_progress.py
# holds the sample): a header line, then blank and tab-indented lines with the command to run.
DVC_HINT_HEADERS = ("To track the changes with git, run:", "To enable auto staging, run:")
DVC_HINT_LINES = ("Use `dvc push` to send your updates to remote storage.",)
_DVC_EMPTY = re.compile(r"^WARNING: '(?P<path>.+)' is empty\.$")  # once per empty dep/out and check
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
SHUTDOWN_NOISE = ("/dulwich/",)
"""A path in a traceback that marks an ``Exception ignored in: ...`` block as shutdown noise:
dulwich's ``Pack.__del__`` runs after ``sys.meta_path`` is gone when DVC exits after an error."""


class DvcOutputFilter:
    """What the loop shows of ``dvc repro`` output: DVC's git/autostage/push hints left out and
    its ``WARNING: '<path>' is empty.`` lines (one per empty directory at every check, 36 an
    attempt early in a run) said once per path in a summary line; the interpreter's
    ``Exception ignored in: ...`` blocks whose traceback runs through a ``SHUTDOWN_NOISE``
    path left out (others are held until they end, then shown whole); every other line (the
    stage's own, DVC's errors and stage lines) passes through unchanged.

    Feed it decoded text as it comes (``feed``), then ``close`` it at the end of the command.
    A partial line holding a carriage return (a progress bar redrawing) is passed through at
    once; other partial lines wait for their newline.

    Args:
        named: empty paths already summarised (by an earlier command); updated in place.
        tail_lines: how many shown lines ``shown`` keeps.

    Attributes:
        shown: the last ``tail_lines`` complete lines passed through (for error messages).
    """

    def __init__(self, named: set[str] | None = None, tail_lines: int = 40) -> None:
        self.shown: deque[str] = deque(maxlen=tail_lines)
        self.named = set() if named is None else named
        self._empty: dict[str, int] = {}  # path -> warnings left out since the last summary
        self._pending = ""  # the partial last line
        self._pending_shown = 0  # characters of it already passed through
        self._blanks = 0  # blank lines held back: they may open a hint
        self._in_hint = False
        self._ignored: list[str] | None = None  # an "Exception ignored in:" block being read

    def feed(self, text: str) -> str:
        """The part of ``text`` (with what came before) to show now."""
        *complete, self._pending = (self._pending + text).split("\n")
        out: list[str] = []
        for line in complete:
            if self._pending_shown:  # the rest of a line shown in part (a progress bar)
                out.append(line[self._pending_shown :] + "\n")
                self._pending_shown = 0
                self.shown.append(line.rsplit("\r", 1)[-1])
                continue
            out += [kept + "\n" for kept in self._line(line)]
        if "\r" in self._pending:
            out.append(self._pending[self._pending_shown :])
            self._pending_shown = len(self._pending)
        return "".join(out)

    def close(self) -> str:
        """What is left to show at the end of the command: its unfinished last line and the
        summary of the "is empty" warnings about paths not named before (or "")."""
        out = self.feed("\n") if self._pending else ""
        if self._ignored is not None:  # the command ended inside the block
            out += "".join(kept + "\n" for kept in self._end_ignored())
        self._blanks, self._in_hint = 0, False  # trailing blank lines are DVC's
        new = [p for p in self._empty if p not in self.named]
        if new:
            n = sum(self._empty[p] for p in new)
            verb = "is" if len(new) == 1 else "are"
            out += f"dvc: {', '.join(new)} {verb} empty ({n} 'is empty' warning{'' if n == 1 else 's'} of DVC left out)\n"
            self.named.update(new)
        self._empty.clear()
        return out

    def _line(self, line: str) -> list[str]:
        """The lines to show for one complete line of output (held blank lines included)."""
        bare = _ANSI.sub("", line).rstrip("\r")
        if self._ignored is not None:
            self._ignored.append(line)
            if bare.startswith((" ", "\t", "Traceback (most recent call last):")):
                return []
            return self._end_ignored()  # its last line: the exception
        if bare.startswith("Exception ignored in: "):
            self._ignored = [line]
            return []
        if self._in_hint and (not bare.strip() or bare.startswith("\t")):
            return []
        self._in_hint = False
        if not bare.strip():
            self._blanks += 1
            return []
        if bare.startswith(DVC_HINT_HEADERS) or bare in DVC_HINT_LINES:
            self._in_hint, self._blanks = bare.startswith(DVC_HINT_HEADERS), 0
            return []
        if m := _DVC_EMPTY.match(bare):
            self._empty[m["path"]] = self._empty.get(m["path"], 0) + 1
            return []
        out = [""] * self._blanks + [line]
        self._blanks = 0
        self.shown.extend(out)
        return out

    def _end_ignored(self) -> list[str]:
        """The lines to show of the ``Exception ignored in:`` block just read: none if it is shutdown noise."""
        block, self._ignored = self._ignored or [], None
        if any(noise in line for line in block for noise in SHUTDOWN_NOISE):
            return []
        out = [""] * self._blanks + block
        self._blanks = 0
        self.shown.extend(out)
        return out


def stage_times(lines: list[tuple[float, str]]) -> dict[str, float]:
    """Wall seconds per stage from ``dvc repro`` output ("Running stage 'x':" marks a start)."""
    marks = [(t, line.split("'")[1]) for t, line in lines if line.startswith("Running stage '")]
    end = lines[-1][0] if lines else 0.0
    return {name: round((marks[i + 1][0] if i + 1 < len(marks) else end) - t, 1) for i, (t, name) in enumerate(marks)}
