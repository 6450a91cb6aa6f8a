"""DVC's record files torn by a kill: ``dvc.lock`` and the ``data/*.dvc`` pointers.

DVC writes them in place (open for writing, then dump), so a kill during the write leaves a
prefix that DVC then refuses to load, and every later DVC command (and ``loop.py``'s data
guard, which reads DVC's index) stops on it. Only the loop's work in progress writes them: a
stage's lock entry (``dvc repro``), a promotion's or a pending commit's ``dvc add``. Neither
step is recorded done until its DVC command returns (``ml.driver.journal``), so the file as it
was at HEAD is a state the run converges from: the step runs again and writes it whole (an
attempt's stages whose lock entries are lost with it run again and make the same bytes).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ml.base.io import atomic_write_bytes
from ml.driver.workspace import LoopError


def unloadable(path: Path) -> str | None:
    """Why DVC cannot load ``path`` (``dvc.lock`` by the lock-file schema, a ``.dvc`` file by the
    single-stage one), in one line; None when it loads or is absent."""
    from dvc.schema import COMPILED_LOCKFILE_SCHEMA, COMPILED_SINGLE_STAGE_SCHEMA
    from dvc.utils.serialize import EncodingError
    from dvc.utils.strictyaml import YAMLSyntaxError, YAMLValidationError, load

    if not path.is_file():
        return None
    schema = COMPILED_LOCKFILE_SCHEMA if path.name == "dvc.lock" else COMPILED_SINGLE_STAGE_SCHEMA
    try:
        load(str(path), schema)
    except (YAMLSyntaxError, YAMLValidationError) as e:
        text = str(e).strip()
        return text.splitlines()[0] if text else type(e).__name__
    except EncodingError:  # cut inside a character of a non-ASCII path
        return "not UTF-8"
    return None


def restore_torn(
    root: Path, head_bytes: Callable[[str], bytes | None], in_progress: bool, echo: Callable[[str], None]
) -> list[str]:
    """Put back, as at HEAD, each of ``dvc.lock`` and ``data/*.dvc`` that DVC cannot load.

    Args:
        root: the repository.
        head_bytes: a path's bytes at HEAD, or None (``Workspace.head_bytes``).
        in_progress: an attempt is in flight or a commit pending: the loop wrote the file.
        echo: where the one line per file restored goes.

    Returns:
        The paths restored (relative to ``root``); a torn file HEAD does not have is removed.

    Raises:
        LoopError: a file DVC cannot load while the loop had nothing in progress (an edit by
            hand), naming it, DVC's complaint and the command that restores it.
    """
    restored = []
    for path in [root / "dvc.lock", *sorted((root / "data").glob("*.dvc"))]:
        why = unloadable(path)
        if why is None:
            continue
        rel = path.relative_to(root).as_posix()
        if not in_progress:
            raise LoopError(
                f"{rel} does not load ({why}) and no attempt of the loop wrote it: "
                f"`git checkout -- {rel}` puts back the committed one"
            )
        committed = head_bytes(rel)
        if committed is None:
            path.unlink()
        else:
            atomic_write_bytes(path, committed)
        restored.append(rel)
        echo(f"{rel} was cut short by a kill during DVC's write ({why}): put back as at HEAD; its step runs again")
    return restored
