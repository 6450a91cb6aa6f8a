"""The public signatures of ml/ that keep a bare ``Any``, with the reason (no function of ml/ takes more than 8 parameters).

Each entry is ``("path:function", "reason")``; ``function`` is ``Class.method`` for a method. Every
other public signature of ml/ names its types (frozen dataclasses, pydantic models, TypedDicts,
``Mapping[str, float]``, ``object`` for an opaque value, ``ml.base.io.JSONValue`` for parsed JSON).
"""

from __future__ import annotations

SIGNATURE_EXCEPTIONS: tuple[tuple[str, str], ...] = (
    # parsed JSON: one named alias of Any
    (
        "ml/base/io.py:JSONValue",
        "parsed JSON typed as json.loads types it (Any): every reader validates the shape where it uses it "
        "(a pydantic model or a DataFileError naming the line and field); a recursive union return of read_json "
        "and iter_jsonl makes 94 mypy errors in 8 files of ml/driver, ml/judge and stages (measured), each a "
        "hand narrowing of a value already validated",
    ),
    # pyspiel: no type stubs
    ("ml/game/openspiel/spec.py:load_openspiel", "returns a pyspiel.Game; pyspiel ships no type stubs"),
    ("ml/game/openspiel/spec.py:OpenSpielSpec.openspiel_game", "returns a pyspiel.Game; pyspiel ships no type stubs"),
    (
        "ml/game/spec.py:ScriptedPlayer.act",
        "state is a pyspiel.State, the commander's GameState or a PettingZoo Decision; a protocol parameter must "
        "be the widest of its implementations' types (mypy checks it contravariantly), and pyspiel has no stubs",
    ),
    (
        "ml/game/env_game.py:ScriptableEnv.state",
        "the env's game state: a pyspiel.State (no stubs) or the commander's GameState, per env",
    ),
    # imports by name and third-party hooks
    (
        "ml/game/pettingzoo/load.py:import_object",
        "the attribute a user's '<module>:<attr>' names (an env factory or a policy): importlib's getattr is untyped",
    ),
    (
        "ml/game/schema_errors.py:name_ranges",
        "a pydantic wrap validator (mode='wrap'): pydantic hands it the raw input and takes back the validated value",
    ),
    (
        "ml/base/progress.py:ProgressBar.__init__",
        "*args/**kwargs are forwarded to tqdm.__init__ as they are; tqdm ships no type stubs (types-tqdm not installed)",
    ),
)
