"""``ml.params``: strict types, and profiles and curriculum phases validated when params load.

Checks: a boolean, a string or a float where an integer is meant, and an integer or a
string where a boolean is meant, are refused with the file, section and key named (an
integer is still a valid float, and a YAML list a valid ``hidden_sizes``); the repo's
params.yaml with every profile, and the tests' TINY params, load; a phase override with an
unknown key or a badly typed value, an unknown section, or a first phase that plays the
previous phase's model is refused at load, naming the phase (issue #12, item 12); a
profile's error names the profile.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ml.params import ParamsError, load_params, params_from_dict
from tests.conftest import ROOT, tiny_params


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("train", "epochs", True, "valid integer"),
        ("train", "epochs", "6", "valid integer"),
        ("train", "epochs", 6.0, "valid integer"),
        ("teacher", "games", "40", "valid integer"),
        ("selfplay", "total_steps", 2000.5, "valid integer"),
        ("gate", "gated", 1, "valid boolean"),
        ("gate", "gated", "yes", "valid boolean"),
        ("export", "only_wins", 0, "valid boolean"),
        ("train", "lr", "0.001", "valid number"),
    ],
)
def test_strict_types_name_the_key(tmp_path: Path, section: str, key: str, value, message: str):
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({section: {key: value}}))
    with pytest.raises(ParamsError, match=rf"{p}: {section}\.{key}: .*{message}"):
        load_params(p)


def test_lax_where_it_is_exact():
    params = params_from_dict({"train": {"lr": 1, "hidden_sizes": [8, 4]}, "selfplay": {"opponent_mix": {"self": 1}}})
    assert params.train.lr == 1.0 and params.train.hidden_sizes == (8, 4) and params.selfplay.opponent_mix == {"self": 1.0}
    with pytest.raises(ParamsError, match=r"train\.hidden_sizes\.1: Input should be a valid integer"):
        params_from_dict({"train": {"hidden_sizes": [8, True]}})


def test_repo_profiles_and_tiny_params_load():
    params = load_params(ROOT / "params.yaml")  # each profile is validated on top of the file as it loads
    assert {"full", "ablation", "crazy_eights", "leduc_poker"} <= set(params.profiles)
    assert params.overridden(params.profiles["full"]).train.epochs == 8
    assert params_from_dict(tiny_params()).train.hidden_sizes == (32,)


def _phases(*overrides: dict, first: dict | None = None) -> dict:
    first = first or {"name": "warmup", "generations": 1, "gated": False}
    return {"curriculum": [first, *({"name": f"p{i}", "generations": 1, **o} for i, o in enumerate(overrides, 1))]}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_phases({"overrides": {"selfplay": {"totl_steps": 500}}}), r"curriculum\.1 \(phase 'p1'\): selfplay\.totl_steps: Extra"),
        (_phases({"overrides": {"selfplay": {"total_steps": "500"}}}), r"curriculum\.1 \(phase 'p1'\): selfplay\.total_steps: .*integer"),
        (_phases({"overrides": {"gate": {"min_games": 5000}}}), r"curriculum\.1 \(phase 'p1'\): .*min_games \(5000\) must not exceed"),
        (_phases({"overrides": {"nosuch": {"a": 1}}}), r"curriculum\.1 \(phase 'p1'\): override names unknown section 'nosuch'"),
        (_phases(first={"name": "g", "generations": 1, "opponent": "previous_phase"}), r"curriculum\.0 \(phase 'g'\): opponent"),
        (_phases({"generations": "2"}), r"curriculum\.1\.generations: Input should be a valid integer"),
        ({"profiles": {"fast": {"train": {"epochz": 1}}}}, r"params\.yaml: profile 'fast': train\.epochz: Extra inputs"),
    ],
)  # fmt: skip
def test_phase_and_profile_overrides_checked_at_load(raw: dict, message: str):
    with pytest.raises(ParamsError, match=message):
        params_from_dict(raw, source="params.yaml")
