"""One vector-unit level for every process that computes, so results do not depend on the machine's CPU.

torch picks its CPU kernels by the widest instruction set the CPU has (ATen's ``DispatchStub``:
AVX-512 where there is one, else AVX2), MKL (bundled in torch's CPU build: its matrix
products) picks its own code branch by CPU model and vendor, and numpy dispatches its
float64 ``exp``/``log`` (the Elo fit, ``ml/judge/plackett_luce.py``) to AVX-512 code where it can. Each
choice rounds differently, so the same params gave other checkpoints on a machine without
AVX-512 (docs/measurements.md, "One vector unit for every machine"). :func:`cap_cpu` caps the
three at a level every x86-64 CPU of the last decade has, by the environment variables each
library reads, before they read them:

* ``ATEN_CPU_CAPABILITY``: ``avx2`` (``default`` on a CPU without AVX2 and FMA, which torch
  would pick there anyway; an explicit ``default`` stays). torch reads it at its first CPU
  operator, not at ``import torch``.
* ``MKL_CBWR``: ``COMPATIBLE``, MKL's conditional numerical reproducibility branch that gives
  the same bits on Intel and other x86 CPUs (SSE2 without ``rcpps``/``rsqrtps``; oneMKL
  developer guide, "Specifying Code Branches"). ``AVX2`` is documented for Intel CPUs only:
  on others MKL takes its ``AUTO`` branch (measured: the same checkpoint as ``AUTO`` on an AMD
  CPU). ``MKL_ENABLE_INSTRUCTIONS`` is capped at ``AVX2`` too.
* ``NPY_DISABLE_CPU_FEATURES``: numpy's dispatch targets above AVX2 are added (read at
  ``import numpy``).
* ``ONEDNN_MAX_CPU_ISA``: ``AVX2`` (oneDNN serves no operator of today's nets on CPU; the cap
  keeps a convolution or bf16 net from bringing AVX-512 back).

The cap is a minimum with what the environment already asks: a process started with lower
levels keeps them. ``ml/__init__.py`` calls :func:`cap_cpu`, so it runs before any ``ml``
module imports torch or numpy, in every process that imports ``ml``: stages, ``loop.py``
(eval, tournament, policy server), self-play pool workers (which also inherit the
environment); Ray workers get :func:`cpu_env` as ``runtime_env`` ``env_vars``
(``ml/runtime/compute.py``). A process that ran a torch operator before importing ``ml`` keeps the
level torch chose then; ``ml.runtime.cli.environment`` records the level in effect
(``<stage>/env``'s ``cpu_capability``) and the driver warns when it differs between attempts.

Not on x86-64 (aarch64, ...) nothing is set: those machines only agree with machines of their
own kind. ``DISTILL_NATIVE_CPU=1`` also leaves everything as the machine offers (the speed
measurement of docs/measurements.md), and results then depend on the CPU again.
OpenBLAS (numpy's ``dot``; not used for any result here) is left alone.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import MutableMapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

NATIVE_ENV = "DISTILL_NATIVE_CPU"
"""Set to ``1``: :func:`cap_cpu` changes nothing."""

X86_64 = ("x86_64", "amd64")
"""``platform.machine()`` (lower case) of the machines the cap applies to."""

ATEN_LEVELS = ("default", "avx2")
"""ATen capabilities at or below the cap, lowest first (``avx512`` is above it)."""

MKL_LEVELS = ("SSE4_2", "AVX", "AVX2")
"""``MKL_ENABLE_INSTRUCTIONS`` values at or below the cap."""

ONEDNN_LEVELS = ("SSE41", "AVX", "AVX2")
"""``ONEDNN_MAX_CPU_ISA`` values at or below the cap."""

MKL_BRANCH = "COMPATIBLE"
"""The ``MKL_CBWR`` branch (see the module docstring)."""

NUMPY_ABOVE_AVX2 = ("X86_V4", "AVX512_ICL", "AVX512_SPR")
"""numpy >= 2.4's dispatch targets above AVX2 (``numpy.show_config()``, "SIMD Extensions")."""

NUMPY_ABOVE_AVX2_OLD = ("AVX512F", "AVX512CD", "AVX512_KNL", "AVX512_KNM", "AVX512_SKX", "AVX512_CLX", "AVX512_CNL",
                        "AVX512_ICL", "AVX512_SPR")  # fmt: skip
"""The same targets under the names of numpy < 2.4."""


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    """The CPU's feature flags (``avx2``, ``fma``, ...) from Linux's ``/proc/cpuinfo``; None elsewhere."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def _numpy_features() -> tuple[str, ...]:
    try:
        major, minor = (int(p) for p in version("numpy").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return NUMPY_ABOVE_AVX2
    return NUMPY_ABOVE_AVX2 if (major, minor) >= (2, 4) else NUMPY_ABOVE_AVX2_OLD


def cpu_env(environ: MutableMapping[str, str] | None = None, machine: str | None = None,
            flags: set[str] | None = None) -> dict[str, str]:  # fmt: skip
    """The environment variables that cap this machine at AVX2, given what ``environ`` already asks.

    Args:
        environ: the environment to start from (None: ``os.environ``).
        machine: ``platform.machine()`` (None: this machine's).
        flags: the CPU's feature flags (None: :func:`cpu_flags`). Where they are unknown only an
            ``ATEN_CPU_CAPABILITY`` already asked for is capped: torch takes ``avx2`` without
            checking the CPU, and its AVX2 kernels crash on a CPU without AVX2.

    Returns:
        Variable -> value; empty off x86-64 or with ``DISTILL_NATIVE_CPU=1``.
    """
    environ = os.environ if environ is None else environ
    machine = (machine or platform.machine()).lower()
    if machine not in X86_64 or environ.get(NATIVE_ENV) == "1":
        return {}
    flags = cpu_flags() if flags is None else flags
    out: dict[str, str] = {}
    aten = environ.get("ATEN_CPU_CAPABILITY", "").lower()
    if flags is not None or aten:  # unknown flags: only a level asked for is capped (it ran there before)
        allowed = ATEN_LEVELS if flags is None or {"avx2", "fma"} <= flags else ATEN_LEVELS[:1]
        out["ATEN_CPU_CAPABILITY"] = aten if aten in allowed else allowed[-1]
    mkl = environ.get("MKL_ENABLE_INSTRUCTIONS", "").upper()
    out["MKL_ENABLE_INSTRUCTIONS"] = mkl if mkl in MKL_LEVELS else "AVX2"
    out["MKL_CBWR"] = MKL_BRANCH
    onednn = environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    out["ONEDNN_MAX_CPU_ISA"] = onednn if onednn in ONEDNN_LEVELS else "AVX2"
    disabled = environ.get("NPY_DISABLE_CPU_FEATURES", "").replace(",", " ").split()
    out["NPY_DISABLE_CPU_FEATURES"] = " ".join(dict.fromkeys([*disabled, *_numpy_features()]))
    return out


def cap_cpu(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Apply :func:`cpu_env` to ``environ`` (None: ``os.environ``, so child processes inherit it); returns what was set."""
    environ = os.environ if environ is None else environ
    values = cpu_env(environ)
    environ.update(values)
    return values


def deterministic_torch() -> None:
    """``torch.use_deterministic_algorithms(True)`` without importing ``torch._inductor`` (imports torch).

    torch's public function (2.x) first imports ``torch._inductor.config``, and with it
    ``torch._dynamo``, ``torch.fx`` and ``sympy`` (1.2 s of CPU at each process start here,
    docs/measurements.md "The test suite's time"), only to set inductor's own ``deterministic``
    flag for graphs that ``torch.compile`` builds; nothing in this project compiles with
    inductor. The flag every operator reads is the one its next line sets,
    ``torch._C._set_deterministic_algorithms`` (what ``torch.are_deterministic_algorithms_enabled``
    reads); this sets that flag alone. The public function is called instead where that hook
    is missing (another torch) or inductor is already imported (its flag then set too).
    """
    import torch

    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None or "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True)
    else:
        setter(True, warn_only=False)


def cpu_capability() -> str:
    """The ATen CPU capability in effect in this process (``AVX2``, ``AVX512``, ``DEFAULT``, ...; imports torch)."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())
