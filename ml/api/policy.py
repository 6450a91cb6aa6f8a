"""The policy endpoints: a Forge decision point in, the served student's (or a bot's) choice out.

| method and path | what |
|---|---|
| ``POST /api/ml/policy/act`` | body: one decision point (a Forge decision record without ``action``); answer: :class:`PolicyAnswer` |
| ``POST /api/ml/policy/act/batch`` | body ``{"decisions": [...]}`` (up to ``MAX_BATCH_POINTS``); answer: :class:`BatchAnswer` |
| ``GET /api/ml/policy/models`` | the default model, the accepted students and the promoted bots |
| ``PUT /api/ml/policy/model`` | body ``{"model": NAME}``: make NAME the default (a control endpoint: token rule) |

``?model=NAME`` on the act endpoints picks the model of one request: ``student`` (the newest
accepted student, the default), ``gen002``, or a promoted bot's name (``ml.driver.models``).
Requests from all clients are answered in shared forward passes (``ml.model.serving.MicroBatcher``).

A decision point is encoded exactly as the train stage encodes a record (``RecordEncoder``); its
legal actions are its ``action_mask``, or, when it has none, every action but attacks on seats the
pod lacks or that are out (``ml.game.commander.encoding.record_legal_mask``; training reads such a
record as all actions legal). Validation of the body runs on the event loop (FastAPI); the seat
checks, encoding, forward pass and answers run in the batcher's worker thread (``ml.model.serving``). Cards
outside the built-in pool get the train stage's fallback (:data:`UNKNOWN_CARD_FALLBACK`) and are
listed in the answer's ``unknown_cards``. Bad input: 422 whose ``detail[].loc`` names the field; a
count outside its bound (``ml.game.commander.forge_record``: life, mana, list lengths ...) is a 422 whose
``msg`` names the allowed range and its reason. A body over ``max_body_bytes``
(:data:`DEFAULT_MAX_BODY_BYTES`) is a 413, answered from its ``Content-Length`` before anything is read,
or, for a chunked body, as soon as the bytes read pass the limit (FastAPI's ``max_body_size``);
``/act``, which takes one point, has the smaller limit :data:`MAX_POINT_BODY_BYTES`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from fastapi import FastAPI, HTTPException, Query, params
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ml.api.errors import FieldError
from ml.base.io import JSONObject
from ml.driver.models import ModelNotFound, ModelRegistry, student_checkpoints
from ml.driver.state import bot_checkpoints
from ml.game.commander.actions import MACRO_ACTIONS, MAX_POD
from ml.game.commander.core.warmup import encode_a_record
from ml.game.commander.encoding import RecordEncoder, record_legal_mask
from ml.game.commander.forge_record import Action, DecisionRecord
from ml.game.record import check_outcome
from ml.model.policy import CheckpointError
from ml.model.serving import MicroBatcher, ServedModel

logger = logging.getLogger(__name__)

MAX_BATCH_POINTS = 4096
"""Most decision points in one batch request (a request-size guard; the batcher splits no request)."""
MAX_DECISION_BYTES = 8 * 1024
"""A generous size of one decision point's JSON: teacher records of 4-seat pods are 2.6 KB on average
and 3.4 KB at most, of 6-seat pods 3.8 KB and 5.4 KB (3,331 records); the Forge fixtures' lines 2.1 KB."""
DEFAULT_MAX_BODY_BYTES = MAX_BATCH_POINTS * MAX_DECISION_BYTES
"""Largest request body (32 MiB: a full batch of generous points), answered 413 beyond it before it is
parsed (``python -m ml.api --max-body-bytes``)."""
MAX_POINT_BODY_BYTES = 16 * MAX_DECISION_BYTES
"""Largest body of ``/act`` (one decision point, 128 KiB: 16 generous points), or ``max_body_bytes`` when
that is smaller: a single point cannot make the server parse a batch-sized body."""
UNKNOWN_CARD_FALLBACK = (
    "cards outside the built-in pool are encoded as the train stage encodes them: in hand they count as kind "
    "'unknown' (hand/hand_unknown), on the battlefield they add nothing to the creature features, and they never "
    "count as affordable"
)
"""What the encoder does with an unknown card (``ml.game.commander.encoding``); sent with every answer that had one."""
CARD_ZONES = ("hand", "battlefield", "graveyard", "command_zone")
ModelQuery = Annotated[str | None, Query(description="student (default: the newest accepted), gen<G>, or a promoted bot")]


class DecisionPoint(DecisionRecord):
    """A decision point: the JSON of a Forge decision record without ``action`` (one sent along is ignored),
    ``game_outcome`` optional (unknown while the game runs). Pods of 2 to 6 players."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"description": "A Forge decision record without action"})

    game_outcome: str | None = None  # type: ignore[assignment]
    action: Action | None = None  # type: ignore[assignment]

    @field_validator("game_outcome")
    @classmethod
    def _outcome_form(cls, v: str | None) -> str | None:  # type: ignore[override]
        return None if v in (None, "") else check_outcome(v, MAX_POD)

    @model_validator(mode="after")
    def _ppo_complete(self) -> DecisionPoint:  # the record's PPO and action checks do not apply
        return self


class BatchRequest(BaseModel):
    """Body of ``POST /api/ml/policy/act/batch``."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    decisions: list[DecisionPoint] = Field(min_length=1, max_length=MAX_BATCH_POINTS)
    """Decision points, answered in this order."""


class ModelInfo(BaseModel):
    """Which model answered."""

    name: str
    """``gen002`` for a student, the bot's name for a promoted bot."""
    kind: str
    """``student`` or ``bot``."""
    path: str
    attempt_id: str | None
    """The attempt that produced it (``Attempt-Id`` trailer)."""
    commit: str | None
    """That attempt's commit SHA (None while uncommitted or unknown)."""
    generation: int | None


class DecisionAnswer(BaseModel):
    """The policy's answer for one decision point."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    macro_action: str
    """The greedy (most probable legal) macro action."""
    action_idx: int
    """Its index in the macro-action list (``ml.game.commander.actions.MACRO_ACTIONS``)."""
    probs: dict[str, float]
    """Probability of each legal macro action (they sum to 1)."""
    value: float
    """Value estimate: the acting seat's expected return."""
    unknown_cards: list[str]
    """Card names outside the built-in pool (encoded with ``unknown_card_fallback``)."""
    unknown_card_fallback: str | None = None


class PolicyAnswer(DecisionAnswer):
    """Answer of ``POST /api/ml/policy/act``."""

    model: ModelInfo


class BatchAnswer(BaseModel):
    """Answer of ``POST /api/ml/policy/act/batch``: one answer per decision point, all from ``model``."""

    model: ModelInfo
    answers: list[DecisionAnswer]


class SelectRequest(BaseModel):
    """Body of ``PUT /api/ml/policy/model``."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=64)


class ModelsAnswer(BaseModel):
    """Answer of ``GET /api/ml/policy/models``."""

    default: str
    students: list[str]
    bots: list[str]


def point_problems(point: DecisionPoint, loc: tuple[str | int, ...]) -> list[FieldError]:
    """What the schema cannot check: seats ``0..n-1`` once each, the actor among them, a legal action.

    Returns:
        FastAPI-style errors (``loc`` under ``loc``), empty when the point is fine.
    """
    seats = [p.seat for p in point.players]
    errors: list[tuple[str, str, Any]] = []
    if sorted(seats) != list(range(len(seats))):
        errors.append(("players", f"seats must be 0..{len(seats) - 1} once each, got {seats}", seats))
    if point.active_seat not in seats:
        errors.append(("active_seat", f"active_seat {point.active_seat} is not a seat of players {seats}", point.active_seat))
    if point.action_mask is not None and not any(point.action_mask):
        errors.append(("action_mask", "no legal action: at least one entry must be 1", point.action_mask))
    return [{"type": "value_error", "loc": (*loc, field), "msg": msg, "input": value} for field, msg, value in errors]


def unknown_cards(point: DecisionPoint, pool: Mapping[str, object]) -> list[str]:
    """Card names of any seat's zones that the built-in pool lacks, sorted."""
    return sorted({n for p in point.players for zone in CARD_ZONES for n in getattr(p, zone) or [] if n not in pool})


class PolicyService:
    """Encodes decision points and answers them with the registry's models through the micro-batcher."""

    def __init__(self, registry: ModelRegistry, batcher: MicroBatcher | None = None) -> None:
        self.registry, self.batcher = registry, batcher or MicroBatcher()
        self.encoder = RecordEncoder()

    def warm_up(self) -> None:
        """Compile the records' encoder (numba; loaded from its cache after the first time) before the
        first request; logs the seconds it took. The server calls it at start (``ml.api.app``)."""
        logger.info("policy endpoint: the compiled encoder is ready in %.1f s", encode_a_record())

    def model(self, name: str | None) -> ServedModel:
        """The model of a request (404 unknown name or no student yet, 409 a checkpoint that does not fit)."""
        try:
            return self.registry.get(name)
        except ModelNotFound as e:
            raise HTTPException(404, str(e)) from e
        except CheckpointError as e:
            raise HTTPException(409, str(e)) from e

    async def answer(
        self, points: list[DecisionPoint], name: str | None, loc: Callable[[int], tuple[str | int, ...]]
    ) -> tuple[ServedModel, list[JSONObject]]:
        """``(model, answers)`` for ``points``, answers as plain dicts of :class:`DecisionAnswer`'s fields.

        The model is resolved now (404/409; a later switch does not change this request's model); the
        checks, encoding, forward pass and answers run in the batcher's worker thread, off the event loop.

        Raises:
            RequestValidationError: 422, every problem of every point (``loc(i)`` prefixes point i's fields).
        """
        model = self.model(name)
        masks: list[np.ndarray] = []

        def prepare() -> tuple[np.ndarray, np.ndarray]:
            problems = [e for i, p in enumerate(points) for e in point_problems(p, loc(i))]
            if problems:
                raise RequestValidationError(problems)
            masks.append(np.stack([record_legal_mask(p) for p in points]))
            return self.encoder.encode_batch(points), masks[0]

        def finish(actions: np.ndarray, probs: np.ndarray, values: np.ndarray) -> list[JSONObject]:
            answers = []
            for i, point in enumerate(points):
                unknown = unknown_cards(point, self.encoder.pool)
                answers.append({
                    "macro_action": MACRO_ACTIONS[int(actions[i])], "action_idx": int(actions[i]),
                    "probs": {MACRO_ACTIONS[a]: float(probs[i, a]) for a in np.flatnonzero(masks[0][i])},
                    "value": float(values[i]), "unknown_cards": unknown,
                    "unknown_card_fallback": UNKNOWN_CARD_FALLBACK if unknown else None,
                })  # fmt: skip
            return answers

        return model, await self.batcher.submit(model, prepare, finish)


def add_policy_routes(
    app: FastAPI,
    root: Path,
    commit_of: Callable[[str], str | None],
    guard: list[params.Depends],
    batcher: MicroBatcher | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> PolicyService:
    """Register the policy endpoints (module docstring) on ``app``.

    Args:
        guard: dependencies of the model switch.
        max_body_bytes: the batch endpoint's body limit in bytes (413 beyond it); ``/act`` takes at most
            the smaller of it and :data:`MAX_POINT_BODY_BYTES`.
    """
    registry = ModelRegistry(root, commit_of, shape=(RecordEncoder.obs_dim, RecordEncoder.num_actions))
    service = PolicyService(registry, batcher)
    app.state.policy = service
    errors: dict[int | str, dict[str, Any]] = {
        404: {"description": "no such model"}, 409: {"description": "unusable model"},
        413: {"description": f"body over {max_body_bytes} bytes"},
    }  # fmt: skip
    act_opts: dict[str, Any] = {"responses": errors, "tags": ["policy"], "max_body_size": max_body_bytes}
    point_opts = {**act_opts, "max_body_size": min(max_body_bytes, MAX_POINT_BODY_BYTES)}

    @app.post("/api/ml/policy/act", response_model=PolicyAnswer, **point_opts)
    async def act(point: DecisionPoint, model: ModelQuery = None) -> JSONResponse:
        """The chosen macro action, its probabilities over the legal actions and the value of one decision point."""
        served, answers = await service.answer([point], model, lambda _: ("body",))
        return JSONResponse({**answers[0], "model": served.describe()})  # built as PolicyAnswer: no second validation

    @app.post("/api/ml/policy/act/batch", response_model=BatchAnswer, **act_opts)
    async def act_batch(body: BatchRequest, model: ModelQuery = None) -> JSONResponse:
        """The answers of many decision points from one model, in order."""
        served, answers = await service.answer(body.decisions, model, lambda i: ("body", "decisions", i))
        return JSONResponse({"model": served.describe(), "answers": answers})

    @app.get("/api/ml/policy/models", response_model=ModelsAnswer, tags=["policy"])
    def models() -> ModelsAnswer:
        """The default model name and every model that can be named."""
        students = [p.stem for p in student_checkpoints(root)]
        return ModelsAnswer(default=registry.default, students=students, bots=list(bot_checkpoints(root)))

    @app.put("/api/ml/policy/model", response_model=ModelInfo, responses=errors, tags=["policy"], dependencies=guard)
    def select(body: SelectRequest) -> ModelInfo:
        """Make a model the default: it is loaded first; requests already answered by the old one finish with it."""
        try:
            served = registry.select(body.model)
        except ModelNotFound as e:
            raise HTTPException(404, str(e)) from e
        except CheckpointError as e:
            raise HTTPException(409, str(e)) from e
        return ModelInfo(**served.describe())

    return service
