"""``python loop.py import-forge PATH... [--cards TABLE] [--weight W]``: the command around the import.

:func:`import_command` copies the files (``ml.driver.forge_import.import_files``), merges the
card table into ``data/forge/cards.yaml``, ``dvc add``s ``data/forge`` and commits it in one
journalled commit (a kill is completed by the next ``loop.py`` start), then gives the ``forge``
source its mixture weight in ``params.yaml`` once.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from ml.base.io import DataFileError, atomic_write_text
from ml.config.curriculum import Overrides
from ml.config.params import load_params
from ml.config.yaml_file import safe_yaml
from ml.data.batch_files import scan_batches
from ml.driver.forge_import import format_report, import_files
from ml.driver.state import LoopState
from ml.driver.teacher_folder import FORGE_DIR
from ml.game.commander.cards import load_card_pool
from ml.game.commander.forge import CARD_TABLE, load_card_table, merge_card_tables


class ImportingRepo(Protocol):
    """What ``import-forge`` needs of the loop's repository (``ml.driver.orchestrator.Loop`` has it)."""

    root: Path
    echo: Callable[[str], None]

    def path(self, rel: Path | str) -> Path: ...
    def git(self, *args: str) -> str: ...
    def load_state(self) -> LoopState: ...
    def committing(
        self, message: str, paths: list[str], dvc_add: tuple[str, ...] = ()
    ) -> AbstractContextManager[dict[str, str]]: ...
    def set_params(self, overrides: Overrides, message: str) -> None: ...


def import_command(loop: ImportingRepo, paths: Sequence[Path], cards: Path | None, weight: float) -> int:
    """``python loop.py import-forge PATH... [--cards TABLE] [--weight W]``.

    Validates and copies the files (:func:`import_files`), merges the card table, ``dvc add``s
    ``data/forge`` and commits ``data/forge.dvc``; when ``train.source_weights`` has no
    ``forge`` weight yet, sets it to ``weight`` in ``params.yaml`` and commits that too.

    Args:
        loop: the repository (``ml.driver.orchestrator.Loop``: :class:`ImportingRepo`).
        paths: Forge files to import.
        cards: a card table to merge into ``data/forge/cards.yaml``, or None.
        weight: the ``forge`` mixture weight to set when there is none (finite, >= 0: ``ml.base.cli_args.mixture_weight``).

    Returns:
        0 when every file was imported (or already was), bad lines left out and listed;
        2 when a file was refused (the rest is still imported), or the card table was
        (missing, a folder, bad: nothing is imported, written or committed).
    """
    state, params = loop.load_state(), load_params(loop.path("params.yaml"))
    if state.in_flight is not None:
        loop.echo(f"import-forge: attempt {state.in_flight.attempt_id} is in flight; let it finish (run loop.py) first")
        return 2
    if params.game.name != "commander":
        loop.echo(f"import-forge: Forge files are commander records; this run plays {params.game.name}")
        return 2
    forge_dir = loop.path(FORGE_DIR)
    try:  # the whole table is checked before anything is written
        table = _merged_cards(forge_dir, cards)
    except DataFileError as e:  # missing, a folder, bad: nothing written, nothing committed
        loop.echo(f"import-forge: {e} (nothing imported)")
        return 2
    tracked = [f"{FORGE_DIR}.dvc", f"{Path(FORGE_DIR).parent}/.gitignore"]
    # journalled: a kill while copying is completed (dvc add, commit) by the next loop.py start, with
    # this first message; dvc add also records a hand edit of data/forge; nothing changed: no commit
    with loop.committing(journal_message(paths, cards), tracked, dvc_add=(FORGE_DIR,)) as commit:
        forge_dir.mkdir(parents=True, exist_ok=True)
        if table is not None:
            _write_cards(forge_dir, table)
        reports = import_files(paths, forge_dir)
        done = [r for r in reports if r.status == "imported"]
        head = f"import-forge: {len(done)} Forge file(s), {sum(r.decisions for r in done)} decisions"
        body = [
            f"{r.source.name} -> {r.imported_to.name}: {r.decisions} decisions, {len(r.bad)} bad lines"
            + (f", {r.held} of imported games left out" if r.held else "")
            + (f", {len(r.rekeyed)} games re-keyed" if r.rekeyed else "")
            for r in done
        ]
        parts = [head + (", card table" if table is not None else ""), *(["\n".join(body)] if body else [])]
        commit["message"] = "\n\n".join(parts)
    loop.echo(format_report(reports, loop.root))
    _set_weight(loop, params.train.source_weights, weight)
    return 2 if any(r.status == "refused" for r in reports) else 0


def journal_message(paths: Sequence[Path], cards: Path | None) -> str:
    """The commit message journalled before copying: what is imported, as far as known then.

    It is used only when the import is interrupted (``committing`` replaces it with the counts
    otherwise), so it says where the decision counts are: in the report, which importing the
    same files again prints (they are then ``already imported``, with their counts).
    """
    names = [p.name for p in paths] + ([f"card table {cards.name}"] if cards is not None else [])
    return (
        f"import-forge: {len(paths)} Forge file(s){', card table' if cards is not None else ''} (interrupted, completed)\n\n"
        + "\n".join(names)
        + "\n\nDecision counts: see the report of `python loop.py import-forge` with the same files."
    )


def _merged_cards(forge_dir: Path, cards: Path | None) -> dict[str, str] | None:
    """The Forge folder's table merged with ``cards``; None when there is nothing to write.

    Raises:
        DataFileError: ``cards`` missing, a folder, or a bad table (see ``load_card_table``).
    """
    if cards is None:
        return None
    if not cards.exists():
        raise DataFileError(cards, None, None, "no such card table file")
    pool = load_card_pool()
    current_path = forge_dir / CARD_TABLE
    current = load_card_table(current_path, pool)
    merged = merge_card_tables(current, load_card_table(cards, pool), cards, current_path)
    return None if merged == current and (current_path.exists() or not merged) else merged


def _write_cards(forge_dir: Path, table: dict[str, str]) -> None:
    text = "# Card table of the imported Forge data: card name -> kind (labels only; python loop.py import-forge --cards)\n"
    out = io.StringIO()
    safe_yaml().dump(dict(sorted(table.items())), out)
    text += out.getvalue()
    atomic_write_text(forge_dir / CARD_TABLE, text)


def _set_weight(loop: ImportingRepo, source_weights: dict[str, float], weight: float) -> None:
    """Give the ``forge`` source its mixture weight once, so imported decisions are sampled."""
    if not (loop.path(FORGE_DIR).is_dir() and scan_batches(loop.path(FORGE_DIR), sources=(), include_forge=True)):
        return
    if "forge" in source_weights:
        if source_weights["forge"] == 0:
            loop.echo("note: train.source_weights.forge is 0: the imported decisions are not trained on")
        return
    if loop.git("status", "--porcelain", "--", "params.yaml").strip():
        loop.echo(f"note: set train.source_weights.forge (e.g. {weight}) in params.yaml yourself: it has uncommitted changes")
        return
    new = {**source_weights, "forge": weight}
    loop.set_params({"train": {"source_weights": new}}, f"params: train.source_weights.forge = {weight} (import-forge)")
    loop.echo(f"train.source_weights.forge = {weight} written to params.yaml and committed (mixture ratios: {new})")
