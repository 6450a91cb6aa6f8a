"""Curriculum phases: an ordered list of stages of a long run, each with its own settings.

``params.yaml`` may hold a ``curriculum`` list; each phase has a ``name``, a number of
``generations``, ``overrides`` (section -> key -> value, applied on top of the base
params while the phase runs), ``gated`` (an ungated phase trains, exports, commits and
always advances), an optional ``opponent: previous_phase`` (self-play opponents are the
frozen PPO agent that passed the previous phase, resolved at run time; with none, because
the previous phase was skipped, the heuristic teacher, see ``opponent_fallback``) and an
optional ``abort_if`` (stop an attempt whose training metric has not cleared a bar by a
number of PPO steps). Without a ``curriculum`` key the loop runs one implicit phase,
``main``, of ``loop.max_generations`` generations with the params as they are.

Pure models and functions with no driver dependency: ``ml.config.params`` validates each phase with
them, and the driver (``ml.driver.transitions``) enters phases with them.

The models are strict like ``ml.config.params`` (``generations: "2"`` is no integer); each phase's
overrides are validated against the params sections when ``params.yaml`` loads
(``ml.config.params.Params``).
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ml.base.io import JSONValue

AbortMetric = Literal["train_win_rate", "entropy", "approx_kl", "clipfrac", "pg_loss", "v_loss"]
ABORT_METRICS: tuple[str, ...] = get_args(AbortMetric)
"""Training metrics of ``ml.learn.ppo.train_ppo`` an ``abort_if`` may name (``selfplay/<metric>``)."""


class AbortIf(BaseModel):
    """Stop the attempt when ``metric`` is below ``below`` once ``at_steps`` PPO decisions are done."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    metric: AbortMetric = "train_win_rate"
    below: float
    at_steps: int = Field(ge=1)


class Phase(BaseModel):
    """One phase of the curriculum."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,40}$")
    generations: int = Field(ge=1)
    gated: bool = True
    overrides: dict[str, dict[str, Any]] = Field(default_factory=dict)
    opponent: Literal["pool", "previous_phase"] = "pool"
    abort_if: AbortIf | None = None

    @model_validator(mode="after")
    def _no_reserved(self) -> Phase:
        reserved = {"run", "profiles", "curriculum"} & set(self.overrides)
        if reserved:
            raise ValueError(f"phase {self.name!r} may not override {sorted(reserved)}")
        return self


Overrides: TypeAlias = dict[str, dict[str, JSONValue]]
"""Params overrides, section -> key -> value (a value as YAML or JSON holds it)."""

FALLBACK_OPPONENT_MIX = {"teacher": 1.0}
"""Self-play opponents of an ``opponent: previous_phase`` phase whose previous phase passed no model."""


def phase_overrides(phase: Phase, previous_winner: str | None) -> Overrides:
    """Everything a phase sets in params.yaml (section -> key -> value): its overrides,
    ``gate.gated``, the gauntlet opponent and the abort rule.

    Args:
        phase: the phase.
        previous_winner: name of the frozen PPO agent that passed the previous phase (e.g.
            ``gen002``), used when ``phase.opponent == "previous_phase"``. None (the previous
            phase was left by ``--skip-to-next-stage``): the phase plays the heuristic teacher
            (``FALLBACK_OPPONENT_MIX``) instead, see ``opponent_fallback``.
    """
    out = {section: dict(values) for section, values in phase.overrides.items()}
    out.setdefault("gate", {})["gated"] = phase.gated
    selfplay = out.setdefault("selfplay", {})
    if phase.opponent == "previous_phase":
        selfplay["opponent_mix"] = {"frozen": 1.0} if previous_winner else dict(FALLBACK_OPPONENT_MIX)
        selfplay["frozen_names"] = [previous_winner] if previous_winner else None
    selfplay.setdefault("abort_if", phase.abort_if.model_dump() if phase.abort_if else None)
    return out


def opponent_fallback(phase: Phase, previous_phase: str, previous_winner: str | None) -> str | None:
    """Why ``phase`` plays the heuristic teacher instead of the previous phase's model, or None when it does not.

    Args:
        phase: the phase being entered.
        previous_phase: name of the phase before it.
        previous_winner: the frozen PPO agent that passed ``previous_phase``, None when it passed none.
    """
    if phase.opponent != "previous_phase" or previous_winner:
        return None
    return (
        f"phase {phase.name!r} plays the previous phase's model, but phase {previous_phase!r} passed none "
        f"(it was skipped): its self-play opponents are the heuristic teacher instead"
    )
