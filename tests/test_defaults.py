"""Every default once: the models' defaults (``ml.config.sections``) are params.yaml's values.

Issue 42, item 7: params.yaml said a key left out takes its default from ``ml/config/sections.py``,
but the two disagreed (``train.source_weights.ppo`` 8.0 there, 0.5 here; ``train.epochs`` 8 and 6;
``train.samples_per_epoch`` 60000 and 40000; ``train.ppo_window`` 1 and 0; ``selfplay.learner_decisions``
300000 and 200000; ``teacher.games`` and ``export.games`` 600 and 300), so deleting a line silently
changed the run. Checks: every field of every section model (nested models included) is written in
params.yaml's sections (the ``profiles`` block, which holds what differs, aside) with its default's
value, and params.yaml has no key the models lack; the keys params.yaml leaves out are exactly
``UNSET``; and params.yaml without its sections loads to the same params as with them.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from ml.config.params import Params, load_params, params_from_dict
from ml.config.sections import TrainParams
from ml.config.yaml_file import safe_yaml
from tests.conftest import ROOT

UNSET = {"train.init_checkpoint", "selfplay.frozen_names", "selfplay.abort_if"}
"""The keys params.yaml does not write: None (unset) until a command sets them for a while, ``--seed-checkpoint``
the first, a curriculum phase the others, and takes them out again (``ml.driver.params_file.ABSENT``: params.yaml
after a curriculum is the file before it, byte for byte, tests/test_curriculum.py). Every other key is written,
so ``dvc params diff`` shows every knob."""

NOT_SECTIONS = {"curriculum", "profiles"}
"""Top-level fields of ``Params`` that are no section with defaults: the optional curriculum and the named overrides."""


def _same(written: Any, default: Any) -> bool:
    """Equal as a value of params: mappings by key, lists by item; a boolean is no number (``1`` is not ``true``)."""
    if isinstance(written, dict) or isinstance(default, dict):
        return (
            isinstance(written, dict)
            and isinstance(default, dict)
            and written.keys() == default.keys()
            and all(_same(written[k], default[k]) for k in written)
        )
    if isinstance(written, list) or isinstance(default, list):
        return (
            isinstance(written, list)
            and isinstance(default, list)
            and len(written) == len(default)
            and all(map(_same, written, default))
        )
    return isinstance(written, bool) == isinstance(default, bool) and written == default


def _differences(model: type[BaseModel], defaults: dict[str, Any], written: dict[str, Any], at: str) -> list[str]:
    """One line per key where params.yaml's ``written`` section and ``model``'s ``defaults`` (JSON) disagree."""
    out = []
    for name, field in model.model_fields.items():
        key, default = f"{at}.{name}", defaults[name]
        if key in UNSET:
            if field.get_default(call_default_factory=True) is not None:
                out.append(f"{key}: in UNSET, but its default is {default!r}, not None")
            if name in written:
                out.append(f"{key}: unset by default, params.yaml writes {written[name]!r} (take it out)")
        elif name not in written:
            out.append(f"{key}: not in params.yaml (its default: {default!r}); write it there")
        elif isinstance(sub := field.annotation, type) and issubclass(sub, BaseModel) and isinstance(written[name], dict):
            out += _differences(sub, default, written[name], key)
        elif not _same(written[name], default):
            out.append(f"{key}: params.yaml {written[name]!r}, {model.__name__} default {default!r}")
    out += [f"{at}.{k}: in params.yaml, no field of {model.__name__}" for k in written if k not in model.model_fields]
    return out


def _loop_ran_here() -> bool:
    """A clone where loop.py ran: its params.yaml holds the run's values (profile, overrides, run section), not the declaration."""
    return (ROOT / "state" / "curriculum_state.json").exists()


@pytest.mark.skipif(_loop_ran_here(), reason="loop.py ran in this clone: params.yaml holds the run's values")
def test_every_default_is_params_yaml() -> None:
    written = safe_yaml().load((ROOT / "params.yaml").read_text())
    defaults = Params().model_dump(mode="json")
    sections = {name for name, f in Params.model_fields.items() if isinstance(f.default, BaseModel)}
    assert set(Params.model_fields) - sections == NOT_SECTIONS  # a new top-level field: a section, or named here
    problems = [
        line
        for name in sections
        for line in (
            _differences(type(getattr(Params(), name)), defaults[name], written[name], name)
            if name in written
            else [f"{name}: section not in params.yaml"]
        )
    ]
    problems += [f"{name}: in params.yaml, no section" for name in written if name not in Params.model_fields]
    assert not problems, "params.yaml and ml/config/sections.py disagree:\n" + "\n".join(sorted(problems))


@pytest.mark.skipif(_loop_ran_here(), reason="loop.py ran in this clone: params.yaml holds the run's values")
def test_a_deleted_line_runs_the_same() -> None:
    """params.yaml with its sections deleted (its profiles kept) loads to the params the whole file gives."""
    raw = safe_yaml().load((ROOT / "params.yaml").read_text())
    whole = load_params(ROOT / "params.yaml")
    bare = params_from_dict({"profiles": raw["profiles"]})
    assert bare.model_dump(exclude={"profiles"}) == whole.model_dump(exclude={"profiles"})
    assert bare.overridden(bare.profiles["full"]) == whole.overridden(whole.profiles["full"])


def test_the_check_names_each_difference() -> None:
    """The walk finds a changed value, a missing key, an extra key, a nested mapping's value and an unset key written."""
    defaults = Params().model_dump(mode="json")
    train = {**defaults["train"], "epochs": 6, "source_weights": {"sim": 1.0, "ppo": 0.5}, "nosuch": 1}
    train["init_checkpoint"] = "seed.pt"
    del train["ppo_window"]
    assert sorted(_differences(TrainParams, defaults["train"], train, "train")) == [
        "train.epochs: params.yaml 6, TrainParams default 8",
        "train.init_checkpoint: unset by default, params.yaml writes 'seed.pt' (take it out)",
        "train.nosuch: in params.yaml, no field of TrainParams",
        "train.ppo_window: not in params.yaml (its default: 1); write it there",
        "train.source_weights: params.yaml {'sim': 1.0, 'ppo': 0.5}, TrainParams default {'sim': 1.0, 'ppo': 8.0}",
    ]
    assert not _same(True, 1) and not _same([1, 2], [1]) and _same({"a": [1.0]}, {"a": [1]})
