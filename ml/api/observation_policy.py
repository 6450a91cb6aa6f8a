"""The policy endpoint of games whose records carry their own observation (OpenSpiel, PettingZoo envs).

| method and path | what |
|---|---|
| ``POST /api/ml/policy/act/observation`` | body: ``{"decisions": [{"observation": [...], "action_mask": [...]}, ...]}`` (up to ``MAX_BATCH_POINTS``); answer: :class:`ObservationBatchAnswer` |

A decision is what a record of such a game holds (``ml.game.record.OpenSpielRecord``): the acting
player's flattened observation (float[obs_dim], as ``PettingZooEnv.observe`` or the record's
``observation`` gives it) and its 0/1 mask (int[num_actions]). The served model is a student or a
promoted bot of the repository (``?model=NAME``, default the newest accepted student,
``ml.driver.models``); the model's own sizes are the check, so the endpoint needs no game code:
an observation or mask of another length, or a mask with no legal action, is a 422 naming the
field. Answers come from the same micro-batcher as the commander's endpoint (``ml.model.serving``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from fastapi import FastAPI, HTTPException, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ml.api.errors import FieldError
from ml.driver.models import ModelNotFound, ModelRegistry
from ml.model.policy import CheckpointError
from ml.model.serving import MicroBatcher

MAX_BATCH_POINTS = 1024
"""Most decisions of one request."""
ModelQuery = Annotated[str | None, Query(max_length=64, description="student (default), genNNN or a bot's name")]
"""``?model=NAME``: the model of one request."""


FLOAT32_MAX = float(np.finfo(np.float32).max)
"""The largest observation value the network takes (float32); larger ones, NaN and infinities are a 422."""


class ObservationPoint(BaseModel):
    """One decision: the acting player's observation and legal mask."""

    model_config = ConfigDict(extra="forbid")

    observation: list[Annotated[float, Field(allow_inf_nan=False, ge=-FLOAT32_MAX, le=FLOAT32_MAX)]] = Field(
        min_length=1, max_length=1_000_000
    )
    """float[obs_dim]: the flattened observation (the record's ``observation``)."""
    action_mask: list[Annotated[int, Field(ge=0, le=1)]] = Field(min_length=1, max_length=100_000)
    """int[num_actions] of 0/1: the legal actions."""


class ObservationBatch(BaseModel):
    """Body of ``POST /api/ml/policy/act/observation``."""

    model_config = ConfigDict(extra="forbid")

    decisions: list[ObservationPoint] = Field(min_length=1, max_length=MAX_BATCH_POINTS)


class ObservationAnswer(BaseModel):
    """The policy's answer for one decision."""

    action_idx: int
    """The greedy (most probable legal) action."""
    probs: dict[str, float]
    """Probability of each legal action, keyed by its index (they sum to 1)."""
    value: float
    """Value estimate: the acting seat's expected return."""


class ObservationBatchAnswer(BaseModel):
    """Answer of ``POST /api/ml/policy/act/observation``: one answer per decision, all from ``model``."""

    model: dict[str, Any]
    """Which model answered (name, kind, path, attempt_id, commit, generation)."""
    answers: list[ObservationAnswer]


def point_problems(point: ObservationPoint, obs_dim: int, num_actions: int, i: int) -> list[FieldError]:
    """FastAPI-style errors of decision ``i`` against a model of ``obs_dim`` inputs and ``num_actions`` outputs."""
    loc = ("body", "decisions", i)
    errors = []
    if len(point.observation) != obs_dim:
        errors.append(("observation", f"{len(point.observation)} values, the model takes {obs_dim}"))
    if len(point.action_mask) != num_actions:
        errors.append(("action_mask", f"{len(point.action_mask)} entries, the model has {num_actions} actions"))
    elif not any(point.action_mask):
        errors.append(("action_mask", "no legal action: at least one entry must be 1"))
    return [{"type": "value_error", "loc": (*loc, field), "msg": msg} for field, msg in errors]


def add_observation_routes(
    app: FastAPI, root: Path, commit_of: Callable[[str], str | None], batcher: MicroBatcher, max_body_bytes: int
) -> ModelRegistry:
    """Register ``POST /api/ml/policy/act/observation`` (module docstring) on ``app``.

    Args:
        root: the repository.
        commit_of: attempt id -> commit SHA (``ml.driver.models``).
        batcher: the micro-batcher the commander's endpoint uses.
        max_body_bytes: the body limit in bytes (413 beyond it).
    """
    registry = ModelRegistry(root, commit_of, shape=None)

    @app.post(
        "/api/ml/policy/act/observation", response_model=ObservationBatchAnswer, tags=["policy"],
        responses={404: {"description": "no such model"}, 409: {"description": "unusable model"}}, max_body_size=max_body_bytes,
    )  # fmt: skip
    async def act_observation(body: ObservationBatch, model: ModelQuery = None) -> JSONResponse:
        """The greedy action, its probabilities over the legal actions and the value of each decision."""
        try:
            served = registry.get(model)
        except ModelNotFound as e:
            raise HTTPException(404, str(e)) from e
        except CheckpointError as e:
            raise HTTPException(409, str(e)) from e
        net, points = served.net, body.decisions

        def prepare() -> tuple[np.ndarray, np.ndarray]:
            problems = [e for i, p in enumerate(points) for e in point_problems(p, net.obs_dim, net.num_actions, i)]
            if problems:
                raise RequestValidationError(problems)
            obs = np.asarray([p.observation for p in points], dtype=np.float32)
            return obs, np.asarray([p.action_mask for p in points], dtype=bool)

        def finish(actions: np.ndarray, probs: np.ndarray, values: np.ndarray) -> list[dict[str, Any]]:
            return [
                {"action_idx": int(actions[i]), "value": float(values[i]),
                 "probs": {str(a): float(probs[i, a]) for a in np.flatnonzero(p.action_mask)}}
                for i, p in enumerate(points)
            ]  # fmt: skip

        answers = await batcher.submit(served, prepare, finish)
        return JSONResponse({"model": served.describe(), "answers": answers})

    return registry
