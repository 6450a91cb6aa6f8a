"""``loop.py onnx MODEL [--out FILE]``: a student or promoted bot as ONNX plus its sidecar JSON.

``MODEL`` is a name of ``ml.driver.models`` (``student``: the newest accepted one, ``gen002``, or a
promoted bot). The sidecar (``FILE`` with suffix ``.json``) holds the input and output names,
shapes and dtypes, the mask convention, the encoder's feature names (one per ``obs`` column,
``ml.game.commander.features.feature_names``), the macro-action names (one per ``probs`` column)
and the model's provenance. Reads the repository; writes only ``FILE`` and its sidecar.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the command's modules (torch, ONNX) are imported when it runs: `loop.py --help` answers without them
    from ml.driver.workspace import Workspace

DEFAULT_DIR = Path("onnx")
"""Default folder of exports (``onnx/<model name>.onnx``), untracked."""


def add_onnx_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``onnx`` subcommand of loop.py."""
    p = sub.add_parser(
        "onnx", aliases=["export-onnx"],
        help="write a student or promoted bot as ONNX, with its feature layout and action names beside it",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.set_defaults(command="onnx")  # the same command under its former name, export-onnx
    p.add_argument("model", nargs="?", help="student (newest accepted, default), gen<G>, or a bot name")
    p.add_argument("--out", type=Path, help="the .onnx file (default: onnx/<model name>.onnx)")


def commit_of(ws: Workspace, attempt_id: str) -> str | None:
    """SHA of the commit whose ``Attempt-Id:`` trailer is ``attempt_id`` (None if none)."""
    out = ws.git("log", "--format=%H %(trailers:key=Attempt-Id,valueonly,separator=)")
    return next((line.split(" ", 1)[0] for line in out.splitlines() if line.partition(" ")[2].strip() == attempt_id), None)


def onnx_command(ws: Workspace, model: str | None, out: Path | None) -> int:
    """Export ``model`` (None: the newest accepted student; see the module docstring). Returns 0, or 2 for an
    unknown or unusable model."""
    from ml.driver.models import ModelNotFound, load_model, resolve
    from ml.game.commander.actions import MACRO_ACTIONS
    from ml.game.commander.features import feature_names
    from ml.model.onnx_file import write_onnx
    from ml.model.policy import CheckpointError

    try:
        path, kind = resolve(ws.root, model)
        served = load_model(ws.root, path, kind, lambda aid: commit_of(ws, aid))
    except (ModelNotFound, CheckpointError) as e:
        print(f"loop.py onnx: {e}", file=sys.stderr)
        return 2
    net = served.net
    names = feature_names()
    if (net.obs_dim, net.num_actions) != (len(names), len(MACRO_ACTIONS)):  # another game's model
        names, actions = [f"obs_{i}" for i in range(net.obs_dim)], [f"action_{i}" for i in range(net.num_actions)]
    else:
        actions = list(MACRO_ACTIONS)
    out = out or ws.path(DEFAULT_DIR / f"{served.name}.onnx")
    if out.suffix != ".onnx" or out.is_dir() or (out.parent.exists() and not out.parent.is_dir()):
        print(f"loop.py onnx: --out {out}: give a file path ending in .onnx (its sidecar is the .json beside it)",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"loop.py onnx: --out {out}: {e.strerror}", file=sys.stderr)
        return 2
    side = write_onnx(
        net, out,
        {"model": served.describe(),
         "encoder": "ml.game.commander.encoding.RecordEncoder (Forge decision record -> arrays -> the compiled encoder "
                    "of the policy endpoint and self-play -> obs)",
         "feature_names": names, "action_names": actions},
    )  # fmt: skip
    print(f"{out}\n{side}")
    return 0
