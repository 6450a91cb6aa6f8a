"""The CPU cap (ml/base/determinism.py): which levels it sets, and the same checkpoints on AVX-512 and AVX2."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ml.base import determinism
from ml.base.determinism import NATIVE_ENV, cpu_env, cpu_flags
from tests.conftest import ROOT, make_project_copy, out_hashes, tiny_params

CAP_VARS = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "NPY_DISABLE_CPU_FEATURES")
AVX2_MACHINE = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}  # fmt: skip
"""What a process limited to AVX2 gets from its environment before the project's cap applies
(torch, MKL, oneDNN and numpy each read their own variable)."""
AVX512 = {"avx2", "fma", "avx512f", "avx512vl", "avx512bw", "avx512dq"}


def test_cap_is_avx2_and_keeps_lower_levels():
    env = cpu_env({}, machine="x86_64", flags=AVX512)
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"
    assert env["MKL_CBWR"] == "COMPATIBLE" and env["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert "X86_V4" in env["NPY_DISABLE_CPU_FEATURES"].split()
    # a higher level asked for is capped, a lower one stays, the user's numpy features are kept
    asked = {"ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
             "NPY_DISABLE_CPU_FEATURES": "AVX2"}  # fmt: skip
    env = cpu_env(asked, machine="x86_64", flags=AVX512)
    assert (env["ATEN_CPU_CAPABILITY"], env["MKL_ENABLE_INSTRUCTIONS"], env["ONEDNN_MAX_CPU_ISA"]) == ("avx2", "AVX", "AVX2")
    assert env["NPY_DISABLE_CPU_FEATURES"].split()[:2] == ["AVX2", "X86_V4"]
    assert cpu_env({"ATEN_CPU_CAPABILITY": "default"}, machine="x86_64", flags=AVX512)["ATEN_CPU_CAPABILITY"] == "default"


def test_no_avx2_no_x86_and_native_leave_torch_alone(monkeypatch):
    # avx2 on a CPU without it would crash torch: default, which torch picks there anyway
    assert (
        cpu_env({"ATEN_CPU_CAPABILITY": "avx2"}, machine="x86_64", flags={"avx", "sse4_2"})["ATEN_CPU_CAPABILITY"] == "default"
    )
    monkeypatch.setattr(determinism, "cpu_flags", lambda: None)  # flags unknown (not Linux)
    assert "ATEN_CPU_CAPABILITY" not in cpu_env({}, machine="x86_64")
    assert cpu_env({"ATEN_CPU_CAPABILITY": "avx512"}, machine="x86_64")["ATEN_CPU_CAPABILITY"] == "avx2"
    assert cpu_env({}, machine="aarch64", flags=set()) == {}
    assert cpu_env({NATIVE_ENV: "1"}, machine="x86_64", flags=AVX512) == {}


_DETERMINISTIC = """
import sys
from ml.base.determinism import deterministic_torch
import torch
{before}
assert not torch.are_deterministic_algorithms_enabled()
deterministic_torch()
print(torch.are_deterministic_algorithms_enabled(), {probe})
"""


@pytest.mark.expensive  # a fresh process: what a stage imports at its start
@pytest.mark.parametrize(
    ("before", "probe", "expected"),
    [
        ("", "'torch._inductor' in sys.modules", ["True", "False"]),  # inductor not imported, so not paid for
        ("import torch._inductor.config as inductor", "inductor.deterministic", ["True", "True"]),  # its flag set too
    ],
)
def test_deterministic_torch_sets_the_operators_flag_without_importing_inductor(before, probe, expected):
    code = _DETERMINISTIC.format(before=before, probe=probe)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == expected, out.stderr


@pytest.mark.expensive
def test_a_stage_sets_deterministic_algorithms_without_importing_inductor():
    code = (
        "import sys; from ml.runtime.cli import stage_setup; import torch; "
        f"stage_setup('merge', '', ['--params', {str(ROOT / 'params.yaml')!r}, '--no-progress'], lambda p: None); "
        "print(torch.are_deterministic_algorithms_enabled(), 'torch._inductor' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"], out.stderr


def test_cpu_flags_reads_proc_cpuinfo(tmp_path):
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(tmp_path / "cpuinfo") == {"fpu", "sse2", "avx2", "fma"}
    assert cpu_flags(tmp_path / "missing") is None


def _repro(repo: Path, extra: dict[str, str]) -> tuple[dict[str, str], str, dict]:
    """``dvc repro selfplay`` (teacher, train, selfplay) in ``repo``, in an environment without the
    cap's variables plus ``extra``; returns (dvc.lock output hashes, ppo.pt md5, selfplay metrics)."""
    env = {k: v for k, v in os.environ.items() if k not in CAP_VARS and k != "DISTILL_ENCODED_CACHE"}
    env = {
        **env,
        "DVC_NO_ANALYTICS": "1",
        "PYTHONHASHSEED": "0",
        "PATH": f"{Path(sys.executable).parent}:{env['PATH']}",
        **extra,
    }
    for d in ("forge", "pool", "seed", "next_student", "frozen", "students"):
        (repo / "data" / d).mkdir(parents=True, exist_ok=True)
    run = subprocess.run(["dvc", "repro", "selfplay"], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, capture_output=True)
    subprocess.run(["git", "commit", "-qm", "repro"], cwd=repo, check=True, capture_output=True)
    md5 = hashlib.md5((repo / "data/models/ppo.pt").read_bytes()).hexdigest()
    return out_hashes(repo, "HEAD"), md5, json.loads((repo / "metrics/selfplay.json").read_text())


@pytest.mark.expensive
@pytest.mark.skipif(not AVX512 <= (cpu_flags() or set()), reason="the CPU has nothing above AVX2 to cap")
def test_avx512_machine_and_avx2_process_give_the_same_checkpoint(tmp_path):
    """As this AVX-512 machine offers, and in a process limited to AVX2 before the project's cap applies:
    the same teacher batches, student and PPO checkpoint (without the cap, torch's AVX-512 kernels
    give another ppo.pt)."""
    machine = _repro(make_project_copy(tmp_path / "machine", tiny_params()), {})
    limited = _repro(make_project_copy(tmp_path / "avx2", tiny_params()), AVX2_MACHINE)
    assert set(machine[0]) >= {"data/teacher", "data/models/student.pt", "data/models/ppo.pt"}
    assert machine[0] == limited[0]
    assert machine[1] == limited[1]
    assert machine[2]["selfplay/env"]["cpu_capability"] == limited[2]["selfplay/env"]["cpu_capability"] == "AVX2"
