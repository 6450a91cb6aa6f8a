"""The ``compute`` section of ``params.yaml``: where the games of every playing stage run.

Kept apart from ``ml/params.py`` (which imports it) so that module stays within its size;
``ml/compute.py`` is the executor these settings configure. Only ``chunk_games`` can change
a result; the backend, the address and the resources never do (``tests/test_ray.py``), so
``dvc.yaml`` lists ``compute.chunk_games`` only and moving a run onto a cluster re-runs no
stage.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ComputeParams(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True, strict=True, allow_inf_nan=False)

    backend: Literal["local", "ray"] = "local"
    """``local``: this machine (self-play in ``selfplay.workers`` processes, the other stages in process);
    ``ray``: every chunk is a Ray task on the cluster at ``address`` (``pip install -e ".[ray]"``)."""
    address: str = Field("local", pattern=r"^(local|auto|ray://[^\s:/]+:\d+|[^\s:/]+:\d+)$")
    """Ray cluster: ``local`` (a Ray started on this machine for the stage, stopped after it), ``auto`` (the
    cluster ``ray start`` runs on this machine), ``host:port`` (a head node's GCS) or ``ray://host:port`` (Ray Client)."""
    cpus_per_chunk: float = Field(1.0, gt=0)
    """CPUs Ray reserves for each chunk (a chunk plays its games on one core)."""
    resources: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources each chunk needs, e.g. ``{rollout: 1}`` to keep chunks on nodes started with that resource."""
    max_retries: int = Field(3, ge=0)
    """Times Ray re-runs a chunk whose worker or node died (the result is the same: a chunk is a pure function of its seed)."""
    max_in_flight: int = Field(0, ge=0)
    """Chunks submitted ahead of the one being read by a stage that stops early (the gate's SPRT); 0: the cluster's CPUs."""
    connect_timeout_s: float = Field(15.0, gt=0)
    """Seconds to wait for the cluster's address to answer at start before the stage fails naming it."""
    chunk_games: int = Field(0, ge=0)
    """Games per chunk of the teacher, export and the rating tournaments (by game index); 0: one chunk per stage.
    Changes export's and the tournament's games (each chunk samples with its own seed); self-play uses
    ``selfplay.rollout_chunks``, the gate's pods fixed chunks of 16 deals."""
