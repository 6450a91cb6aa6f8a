"""Learning curves (DVCLive, ``ml/learn/curves.py``), the generation plot rows and the recorded versions.

Checks: the train, selfplay and gate stages with ``--plots`` write one TSV per curve (a
point per epoch, PPO update, deal) and checkpoints identical to those of a run without it
(logging draws no random numbers and changes no float op); every stage's metrics carry
``<stage>/env``; the generation rows and the version warning of ``ml.driver.generations``.
"""

from __future__ import annotations

import csv
import itertools
import re
import sys
from pathlib import Path

import pytest
import torch

from ml.driver.generations import generation_rows, version_warning
from ml.driver.state import HistoryEntry
from ml.learn.curves import METRICS_SUBDIR
from stages import gate, selfplay, train
from tests.conftest import Pipeline


def _curve(folder: Path, name: str) -> list[tuple[int, float]]:
    with (folder / METRICS_SUBDIR / f"{name}.tsv").open() as f:
        return [(int(r["step"]), float(r[name])) for r in csv.DictReader(f, delimiter="\t")]


def _same_weights(a: Path, b: Path) -> bool:
    sa, sb = torch.load(a, weights_only=False)["state_dict"], torch.load(b, weights_only=False)["state_dict"]
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_stage_curves_leave_outputs_unchanged(pipeline: Pipeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)  # no DVC repo here: DVCLive only writes its folder
    d, c = pipeline.dirs, pipeline.common
    student, ppo, cand = tmp_path / "student.pt", tmp_path / "ppo.pt", tmp_path / "cand.pt"
    args = ["--teacher", str(d["teacher"]), "--pool", str(d["pool"]), "--out", str(student), "--plots", "plots/train"]
    assert train.main([*c, *args, "--metrics", "m/train.json"]) == 0
    assert _same_weights(student, pipeline.root / "student.pt")
    epochs = _curve(tmp_path / "plots/train", "holdout_accuracy")
    assert [s for s, _ in epochs] == [1, 2]  # tiny params: two epochs
    assert epochs[-1][1] == pytest.approx(pipeline.metrics("train")["train/holdout_accuracy"])
    assert {s for s, _ in _curve(tmp_path / "plots/train", "loss")} == {1, 2}

    args = ["--student", str(pipeline.root / "student.pt"), "--frozen", str(d["frozen"]), "--out", str(ppo)]
    assert selfplay.main([*c, *args, "--plots", "plots/selfplay", "--metrics", "m/selfplay.json"]) == 0
    assert _same_weights(ppo, pipeline.root / "ppo.pt")
    for name in ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "win_rate", "decisions_per_s"):
        assert len(_curve(tmp_path / "plots/selfplay", name)) >= 1, name
    assert _curve(tmp_path / "plots/selfplay", "approx_kl")[-1][1] == pytest.approx(
        pipeline.metrics("selfplay")["selfplay/approx_kl"]
    )

    gate_args = [a if a != str(pipeline.root / "cand.pt") else str(cand) for a in pipeline.gate_args]
    assert gate.main([*c, *gate_args, "--plots", "plots/gate", "--metrics", "m/gate.json"]) == 0
    assert _same_weights(cand, pipeline.root / "cand.pt")
    llr = _curve(tmp_path / "plots/gate", "llr")
    g = pipeline.metrics("gate")
    assert llr[-1] == (g["gate/eval_games"], pytest.approx(g["gate/sprt_llr"]))
    assert all(b > a for (a, _), (b, _) in itertools.pairwise(llr)), "one point per deal, games increasing"


def test_metrics_carry_versions(pipeline: Pipeline):
    for stage in ("teacher", "train", "selfplay", "export", "gate", "merge"):
        env = pipeline.metrics(stage)[f"{stage}/env"]
        assert env["torch"] == torch.__version__, stage
        assert set(env) == {"python", "torch", "dvc", "numpy", "git_sha", "cpu_capability"}, stage
        assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability(), stage  # AVX2 on x86-64 (ml.base.determinism)


def _attempt(attempt_id: str, generation: int, verdict: str, torch_version: str, capability: str = "AVX2") -> dict:
    env = {"python": "3.11.2", "torch": torch_version, "dvc": "3.60.0", "numpy": "2.1.0", "git_sha": attempt_id,
           "cpu_capability": capability}  # fmt: skip
    return {
        "attempt_id": attempt_id, "generation": generation, "attempt": 1, "verdict": verdict,
        "figures": {"win_rate": 0.4, "win_rate_low": 0.3, "win_rate_high": 0.5},
        "metrics": {"train": {"train/sampled_share": {"ppo": 0.25, "sim": 0.75}, "train/env": env},
                    "gate": {"gate/student_win_rate": 0.27}},
    }  # fmt: skip


def test_generation_rows_count_episodes_and_nash_conv():
    """Each row carries the attempt's games and the running sum (the x axis of the NashConv plot)."""
    attempts = [
        _attempt("a1", 1, "accepted", "2.13.0"),
        _attempt("a2", 2, "rejected", "2.13.0"),
        _attempt("a3", 2, "accepted", "2.13.0"),
    ]
    for entry, episodes, nash_conv in zip(attempts, (1200, 300, 700), (0.9, 0.8, 0.5), strict=True):
        entry["episodes"] = episodes
        entry["metrics"]["train"]["train/nash_conv"] = nash_conv
    rows = generation_rows([HistoryEntry.model_validate(a) for a in attempts], [])
    assert [(r["episodes"], r["cumulative_episodes"], r["nash_conv"]) for r in rows] == [
        (1200, 1200, 0.9),
        (300, 1500, 0.8),
        (700, 2200, 0.5),
    ]


def test_generation_rows_and_version_warning():
    attempts = [
        HistoryEntry.model_validate(a)
        for a in (_attempt("a1", 1, "accepted", "2.13.0"), _attempt("a2", 2, "rejected", "2.13.0"))
    ]
    elo = [{"attempt_id": "a1", "table": [{"player": "gen001", "elo": 35.0, "low": 5.0, "high": 65.0}]}]
    rows = generation_rows(attempts, elo)
    assert [r["attempt_no"] for r in rows] == [1, 2]
    assert rows[0] | {} == {
        "attempt_no": 1, "generation": 1, "attempt": 1, "verdict": "accepted", "gate_win_rate": 0.4,
        "gate_win_low": 0.3, "gate_win_high": 0.5, "student_win_rate": 0.27, "elo": 35.0, "elo_low": 5.0,
        "elo_high": 65.0, "ppo_share": 0.25, "gate_mean_return": None, "gate_return_low": None, "gate_return_high": None,
        "student_mean_return": None, "episodes": None, "cumulative_episodes": 0, "nash_conv": None,
    }  # fmt: skip
    assert rows[1]["elo"] is None  # a rejected attempt triggers no refit
    assert version_warning(attempts[:1], attempts[1].metrics, "a2") is None
    newer = _attempt("a3", 2, "accepted", "2.14.0")["metrics"]
    warning = version_warning(attempts, newer, "a3")
    assert warning is not None and "torch 2.13.0 -> 2.14.0" in warning and "a2" in warning
    assert version_warning([], newer, "a3") is None
    # same versions, another vector unit (a process that ran torch before ml capped it, or a DISTILL_NATIVE_CPU run)
    wider = _attempt("a3", 2, "accepted", "2.13.0", capability="AVX512")["metrics"]
    warning = version_warning(attempts, wider, "a3")
    assert warning is not None and "cpu_capability AVX2 -> AVX512" in warning and "torch" not in warning


@pytest.mark.expensive
def test_dvc_plots_of_a_two_generation_run(reference_run, tmp_path: Path):
    """``dvc plots show/diff`` in the reference run's repo: every declared plot has data, both attempts'; the report HTML loads nothing from the network."""
    import json
    import os
    import subprocess

    repo = reference_run[0]
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}

    def dvc(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dvc", *a], cwd=repo, env=env, capture_output=True, text=True, check=True)

    shown = json.loads(dvc("plots", "show", "--json").stdout)["data"]
    student, ppo, gate_ = (
        ("student_loss", "student_accuracy"),
        ("ppo_losses", "ppo_policy", "ppo_win_rate", "ppo_speed"),
        ("gate_sprt",),
    )
    generations = ("generation_win_rates", "generation_elo", "generation_ppo_share")
    for plot in (*student, *ppo, *gate_, *generations):
        content = shown[plot][0]["content"]
        assert content["data"]["values"], plot
        # the series template (.dvc/plots/series.json, tests/test_plots.py), filled by this DVC
        assert content["encoding"]["color"]["field"] == "series" and content["encoding"]["x"]["axis"]["format"] == "d", plot
        assert "<DVC_METRIC" not in json.dumps(content), plot
    share = shown["generation_ppo_share"][0]["content"]["data"]["values"]
    assert [int(v["attempt_no"]) for v in share] == [1, 2]  # one row per attempt, both attempts
    diff = json.loads(dvc("plots", "diff", "HEAD~1", "--json").stdout)["data"]
    assert set(diff["ppo_losses"][0]["revisions"]) == {"workspace", "HEAD~1"}
    dvc("plots", "show", "-o", str(tmp_path / "report"))
    html = (tmp_path / "report/index.html").read_text()
    # offline: the page loads the vendored scripts (.dvc/config plots.html_template), nothing from a CDN;
    # the specs' "$schema" URLs are identifiers that vega-embed fetches nothing for
    assert "../ml/api/static/vendor/vega-embed.min.js" in html
    urls = re.findall(r"https?://[^\s\"'<>)]+", html)
    assert urls and all(u.startswith("https://vega.github.io/schema/") for u in urls), set(urls)
    assert all(f'"$schema": "{u}"' in html for u in urls)
    assert dvc("status").stdout.strip() == "Data and pipelines are up to date."
    for rev in ("HEAD~1", "HEAD"):  # each attempt's commit pins its curves and versions
        files = subprocess.run(
            ["git", "ls-tree", "-r", "--name-only", rev, "plots"], cwd=repo, capture_output=True, text=True
        ).stdout
        assert "plots/selfplay/plots/metrics/approx_kl.tsv" in files and "plots/generations.json" in files
        train = json.loads(
            subprocess.run(["git", "show", f"{rev}:metrics/train.json"], cwd=repo, capture_output=True, text=True).stdout
        )
        assert train["train/env"]["torch"] == torch.__version__
