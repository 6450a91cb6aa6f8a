"""The FastAPI app: the dashboard page, the loop's status and history, and the control endpoints.

Endpoints (OpenAPI schema at ``/openapi.json``, interactive docs at ``/docs``):

| method and path | what |
|---|---|
| ``GET /`` | the dashboard page |
| ``GET /api/ml/distill/status`` | state, generation, attempt, stage and progress, last verdict, HEAD SHA |
| ``GET /api/ml/distill/history`` | every attempt of ``state/eval_history.json`` with its commit SHA |
| ``GET /api/ml/elo/history`` | ``state/elo_history.json``, ``[]`` while absent |
| ``POST /api/ml/distill/start`` | launch ``loop.py`` (body: ``max_generations``, ``params`` overrides) |
| ``POST /api/ml/distill/pause`` / ``resume`` | pause between stages / go on |
| ``POST /api/ml/distill/stop`` | finish the current stage and exit; ``{"force": true}`` kills now |
| ``/api/ml/policy/...`` | the served student's decisions (``ml.api.policy``) |

Control endpoints (the POSTs) need ``Authorization: Bearer <token>`` when the app has a
token (401 without it, 403 with a wrong one). Without a token they work only when the
server is bound to a loopback address (403 otherwise). A browser request from another
origin is refused (403), and on a loopback bind only loopback ``Host`` names are served
(DNS-rebinding guard).
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Body, Depends, FastAPI, Header, HTTPException, Query, Request, params
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware

from ml.api.control import ControlError, Launcher, LoopController
from ml.api.observation_policy import add_observation_routes
from ml.api.overrides import OverrideError, validate_overrides
from ml.api.page import render_page, render_panels
from ml.api.policy import DEFAULT_MAX_BODY_BYTES, add_policy_routes
from ml.api.readers import RepoReadError, RepoView
from ml.api.schemas import ControlResult, LoopStatus, Problem, StartRequest, StartResult, StopRequest
from ml.api.status import loop_status
from ml.base.io import JSONObject

logger = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
"""Vendored scripts (``static/vendor/``: vega, vega-lite, vega-embed, swagger-ui; licenses beside them)."""
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
"""Host names served on a loopback bind (plus ``testserver``, the name FastAPI's TestClient uses)."""
PROBLEMS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "token required (the server has one)"},
    403: {"model": Problem, "description": "wrong token, non-loopback bind without token, or cross-origin request"},
    409: {"model": Problem, "description": "the loop's state does not allow this now"},
}


async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    """The 422 of a body that does not validate: each problem's ``loc``, ``msg`` and ``type``.

    FastAPI's own handler echoes each bad input, and a NaN or Infinity in a body cannot be
    written back as JSON (it answered 500): the 422 names each field without the input."""
    keep = ("loc", "msg", "type")
    return JSONResponse({"detail": [{k: e[k] for k in keep if k in e} for e in exc.errors()]}, status_code=422)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an IP address or ``localhost``) is a loopback address."""
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _guard(bind_host: str, token: str | None) -> Callable[[Request, str | None], None]:
    """The dependency that every control endpoint runs first (see module docstring)."""
    loopback = is_loopback(bind_host)

    def guard(request: Request, authorization: Annotated[str | None, Header()] = None) -> None:
        if token is None and not loopback:
            raise HTTPException(
                403, f"control endpoints are off: the server listens on {bind_host} (not loopback) and has no token; "
                "restart it with --token or DISTILL_API_TOKEN",
            )  # fmt: skip
        if token is not None:
            scheme, _, given = (authorization or "").partition(" ")
            if scheme.lower() != "bearer" or not given:
                raise HTTPException(401, "send Authorization: Bearer <token>", headers={"WWW-Authenticate": "Bearer"})
            if not secrets.compare_digest(given.encode(), token.encode()):
                raise HTTPException(403, "wrong token")
        origin = request.headers.get("origin")
        if origin and urlsplit(origin).netloc != request.headers.get("host"):
            raise HTTPException(403, f"cross-origin control request from {origin} refused")

    return guard


def create_app(
    repo: Path,
    bind_host: str = "127.0.0.1",
    token: str | None = None,
    launcher: Launcher | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> FastAPI:
    """Build the app for the loop repository ``repo``.

    Args:
        repo: the repository root (where ``loop.py`` and ``params.yaml`` are).
        bind_host: the address the server listens on; decides the token rule.
        token: bearer token of the control endpoints; None for none.
        launcher: replaces ``ml.api.control.launch_loop`` (tests).
        max_body_bytes: largest request body of any endpoint, in bytes; a bigger one is a 413
            (``ml.api.policy``: from ``Content-Length`` before reading, or once a chunked body passes it).

    Raises:
        RepoReadError: ``repo`` is not a git repository.
    """
    view = RepoView(repo)
    controller = LoopController(view, launcher=launcher)
    # /docs from the vendored swagger-ui files (no CDN); the dashboard's vega scripts under /static too
    app = FastAPI(
        title="distill-loop", summary="Watch and steer loop.py", version="1", docs_url=None, redoc_url=None,
        max_body_size=max_body_bytes, lifespan=_warm_up,
    )  # fmt: skip
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.get("/docs", include_in_schema=False)(_swagger_docs)
    if is_loopback(bind_host):
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=[*LOOPBACK_NAMES, "testserver"])
    app.state.view, app.state.controller = view, controller

    @app.exception_handler(ControlError)  # LoopBusyError, LoopNotRunningError, DirtyParamsError too
    async def _conflict(_: Request, exc: ControlError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=409)

    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]

    @app.exception_handler(RepoReadError)
    async def _unreadable(_: Request, exc: RepoReadError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=500)

    controls_enabled = token is not None or is_loopback(bind_host)
    _add_read_routes(app, view, controller, token_required=token is not None, controls_enabled=controls_enabled)
    _add_control_routes(app, controller, [Depends(_guard(bind_host, token))])
    commit_of = lambda aid: c.sha if (c := view.attempt_commits().get(aid)) else None  # noqa: E731
    service = add_policy_routes(app, view.root, commit_of, [Depends(_guard(bind_host, token))], max_body_bytes=max_body_bytes)
    add_observation_routes(app, view.root, commit_of, service.batcher, max_body_bytes)
    return app


@asynccontextmanager
async def _warm_up(app: FastAPI) -> AsyncIterator[None]:
    """At the server's start: the policy endpoint's encoder compiled before the first request
    (not when the app is built: ``openapi()`` alone, as the manual's build asks, compiles nothing)."""
    app.state.policy.warm_up()
    yield


def _swagger_docs() -> HTMLResponse:
    """The interactive API docs, with swagger-ui from ``/static/vendor/``."""
    return get_swagger_ui_html(
        openapi_url="/openapi.json", title="distill-loop API", swagger_js_url="/static/vendor/swagger-ui-bundle.js",
        swagger_css_url="/static/vendor/swagger-ui.css", swagger_favicon_url="data:,",
    )  # fmt: skip


def _add_read_routes(
    app: FastAPI, view: RepoView, controller: LoopController, token_required: bool, controls_enabled: bool
) -> None:
    """The page, its panels, status and the two histories (open to every client)."""

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard() -> str:
        return render_page(view, controller, token_required=token_required, controls_enabled=controls_enabled)

    @app.get("/dashboard/panels", response_class=HTMLResponse, include_in_schema=False)
    def panels() -> str:
        return render_panels(view, controller)

    @app.get("/api/ml/distill/status", response_model=LoopStatus, tags=["distill"])
    def status() -> JSONObject:
        """Where the loop is: state, generation, attempt, stage and progress, last verdict, HEAD SHA."""
        return loop_status(view, controller)

    @app.get("/api/ml/distill/history", tags=["distill"])
    def history(metrics: Annotated[bool, Query(description="include every stage's metrics")] = True) -> list[dict[str, Any]]:
        """Every attempt of ``state/eval_history.json`` (oldest first) with ``commit``: its SHA, or None."""
        return view.history_with_commits(include_metrics=metrics)

    @app.get("/api/ml/elo/history", tags=["elo"])
    def elo_history() -> Any:
        """``state/elo_history.json`` as written by the ratings stage; ``[]`` while it is absent."""
        return view.elo_history()


def _add_control_routes(app: FastAPI, controller: LoopController, guard: list[params.Depends]) -> None:
    """Start, stop, pause, resume: each runs ``guard`` (token and origin rules) first."""
    opts: dict[str, Any] = {"dependencies": guard, "responses": PROBLEMS, "tags": ["control"]}

    @app.post("/api/ml/distill/start", response_model=StartResult, **opts)
    def start(body: Annotated[StartRequest | None, Body()] = None) -> JSONObject:
        """Commit params overrides (if any), clear a stale pause/stop and launch ``loop.py`` in its own session."""
        body = body or StartRequest()
        try:
            overrides = validate_overrides(body.params)
            return controller.start(body.max_generations, overrides)
        except OverrideError as e:
            raise RequestValidationError(e.errors) from e

    @app.post("/api/ml/distill/stop", response_model=ControlResult, **opts)
    def stop(body: Annotated[StopRequest | None, Body()] = None) -> JSONObject:
        """Ask the loop to stop after the current stage; with ``{"force": true}`` kill its process group now."""
        if body is not None and body.force:
            return controller.kill()
        return controller.request("stop")

    @app.post("/api/ml/distill/pause", response_model=ControlResult, **opts)
    def pause() -> JSONObject:
        """Ask the loop to wait before its next stage (status becomes ``paused`` when it does)."""
        return controller.request("pause")

    @app.post("/api/ml/distill/resume", response_model=ControlResult, **opts)
    def resume() -> JSONObject:
        """Let a paused loop go on."""
        return controller.request("resume")
