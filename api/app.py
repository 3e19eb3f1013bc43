"""The web app factory: the REST API, with chat and review mounted beside it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from quart import Quart, Response, request
from werkzeug.exceptions import (
    BadRequest,
    HTTPException,
    InternalServerError,
    MethodNotAllowed,
    NotFound,
    RequestEntityTooLarge,
)

from api.app_services import AppServices
from api.operations import install_operations, ops_metrics
from api.problems import ApiError
from api.ratelimit import make_rate_limiter
from api.ratelimit_http import add_rate_limit_headers
from api.requestids import install_request_ids, request_id
from api.status_cache import StatusCache, listen_for_invalidations
from api.usage import UsageRecorder
from core.auth_cache import ApiKeyCache
from core.bus import make_bus
from core.db import Database
from core.heap import freeze_start_up
from core.settings import Settings
from core.web.files import file_in_folder
from core.web.services import close_request_session, commit_request_session
from core.web.sessions import signin_here

log = logging.getLogger(__name__)

_FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})
MAX_BODY_BYTES = 1024 * 1024


def create_app(settings: Settings, *, run_worker: bool = False) -> Quart:
    """Build the web app. With `run_worker`, an in-process worker runs beside it (`vouch serve`)."""
    # root_path anchors the folders to the code, not to whatever directory the process started in.
    app = Quart("vouch", root_path=str(Path(__file__).parent), template_folder="../templates", static_folder=None)
    static_folder = Path(__file__).resolve().parent.parent / "static"

    @app.get("/static/<path:filename>", endpoint="static")
    async def static_file(filename: str) -> Response:
        return await file_in_folder(static_folder, filename)

    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["JSON_SORT_KEYS"] = False
    install_request_ids(app)  # first, so that every later hook's log lines carry the id
    install_operations(app)  # /metrics and /readyz; counts, times and logs every request

    @app.before_request
    async def refuse_large_bodies() -> None:
        # Refused from the declared length before authentication or any read; a body sent without
        # a length is cut off at the same limit while it is read (MAX_CONTENT_LENGTH).
        if (request.content_length or 0) > MAX_BODY_BYTES:
            raise RequestEntityTooLarge()

    @app.before_request
    async def refuse_nul_in_path() -> None:
        # No id holds U+0000, and PostgreSQL cannot even compare text with one (a 500 in the lookup): not found.
        if "\x00" in request.path:
            raise NotFound()
        # Nor can it store one: a form field holding U+0000 is malformed input, not a server error.
        if request.method == "POST" and request.mimetype in _FORM_TYPES:
            form = await request.form
            if any("\x00" in value for value in form.values()):
                raise BadRequest("a form field contains a NUL character")

    from api.decisions import blueprint as decisions_blueprint
    from api.executions import blueprint as executions_blueprint
    from api.tasks import blueprint as tasks_blueprint

    app.register_blueprint(tasks_blueprint)
    app.register_blueprint(decisions_blueprint)
    app.register_blueprint(executions_blueprint)
    from api.suites import blueprint as suites_blueprint

    app.register_blueprint(suites_blueprint)  # /api/eval/suites (issue 23)
    from api.webhooks import blueprint as webhooks_blueprint

    app.register_blueprint(webhooks_blueprint)  # /api/eval/executions/<id>/webhook/redeliver
    from api.external import blueprint as external_blueprint

    app.register_blueprint(external_blueprint)  # an external agent's events, checkpoints and completion
    from api.model_choices import blueprint as model_choices_blueprint

    app.register_blueprint(model_choices_blueprint)  # /api/eval/models
    from api.apidocs import blueprint as apidocs_blueprint

    app.register_blueprint(apidocs_blueprint)  # /api/openapi.json and /api/docs
    from api.pages import blueprint as pages_blueprint
    from api.pages import error_page

    app.register_blueprint(pages_blueprint)
    from chat.pages import blueprint as chat_blueprint

    app.register_blueprint(chat_blueprint)
    from review.mailbox import blueprint as mailbox_blueprint
    from review.pages import blueprint as review_blueprint

    app.register_blueprint(review_blueprint)  # /review/link/<token>: the review mail's links
    app.register_blueprint(mailbox_blueprint)  # /mailbox: the dev mailbox
    from review.inbox import blueprint as inbox_blueprint

    app.register_blueprint(inbox_blueprint)  # /review/inbox: a signed-in reviewer's checkpoints
    app.add_template_global(signin_here)  # base.html's Sign in link
    app.after_request(commit_request_session)
    app.after_request(add_rate_limit_headers)  # on every keyed response, errors included
    app.teardown_request(close_request_session)

    @app.errorhandler(ApiError)
    async def api_error(error: ApiError) -> Response:
        return error.response()

    @app.errorhandler(HTTPException)
    async def http_error(error: HTTPException) -> Any:
        if not request.path.startswith("/api/"):
            return await error_page(error)
        code = {413: "content_too_large"}.get(error.code or 500, (error.name or "error").lower().replace(" ", "_"))
        detail = {
            404: "no such endpoint",
            405: f"{request.method} is not allowed here",
            413: f"the request body is larger than {MAX_BODY_BYTES} bytes (1 MiB)",
        }.get(error.code or 500, error.description or "")
        headers = {}
        if isinstance(error, MethodNotAllowed) and error.valid_methods:
            headers["Allow"] = ", ".join(sorted(error.valid_methods))
        return ApiError(error.code or 500, code, detail, headers=headers).response()

    @app.errorhandler(500)
    async def server_error(error: InternalServerError) -> Any:
        # Quart has logged the exception (with the request id); the caller gets no internals.
        detail = f"something went wrong on our side; quote request id {request_id()} if you report it"
        if not request.path.startswith("/api/"):
            return await error_page(
                error, detail=f"Something went wrong on our side. Quote request id {request_id()} if you report it."
            )
        return ApiError(500, "internal_error", detail).response()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    background: dict[str, Any] = {}

    @app.before_serving
    async def start() -> None:
        bus = make_bus(settings.redis_url)
        db = Database(settings.database_url, bus, traces=settings.otel_traces_endpoint is not None)
        auth_cache, status_cache = ApiKeyCache(settings.auth_cache_seconds), StatusCache(settings.status_cache_seconds)
        app.extensions["vouch"] = AppServices(
            settings=settings,
            bus=bus,
            db=db,
            usage=UsageRecorder(db),
            rate_limiter=make_rate_limiter(settings),
            auth_cache=auth_cache,
            status_cache=status_cache,
            cache_listening=listen_for_invalidations(bus, auth_cache, status_cache),
        )
        background["usage_stop"] = asyncio.Event()
        background["usage"] = asyncio.create_task(app.extensions["vouch"].usage.run(background["usage_stop"]))
        if run_worker:
            from agents.worker import Worker

            stop = asyncio.Event()
            worker = Worker(settings, app.extensions["vouch"].db)
            background["stop"] = stop
            background["task"] = asyncio.create_task(worker.run(stop))

    @app.after_serving
    async def stop() -> None:
        if "task" in background:
            background["stop"].set()
            with contextlib.suppress(asyncio.CancelledError):
                await background["task"]
        if "usage" in background:
            # The last flush: counts of this process's final minute are written, not dropped.
            background["usage_stop"].set()
            await background["usage"]
        found: AppServices | None = app.extensions.pop("vouch", None)
        if found is not None:
            await found.cache_listening.stop()
            await found.auth_cache.close()
            await found.db.dispose()
            await found.bus.close()
            await found.rate_limiter.close()

    return app


def freeze_heap_once_serving(app: Quart) -> None:
    """For a server process: its start-up objects leave the collector's walks once every start-up hook has run
    (`core.heap.freeze_start_up`; Quart runs `while_serving` after all `before_serving`)."""

    @app.while_serving
    async def frozen() -> AsyncGenerator[None, None]:
        freeze_start_up()
        yield


def create_asgi_app(settings: Settings, *, run_worker: bool = False, server_process: bool = False) -> Any:
    """What a web process serves: the Quart app with the chat's Socket.IO server and the MCP endpoint (`/mcp`)
    mounted beside it (`vouch serve` and `vouch web`, with `server_process`, and the tests' live servers)."""
    from api.mcp_server import mount_mcp
    from chat.socket import mount_chat

    app = create_app(settings, run_worker=run_worker)
    if server_process:
        freeze_heap_once_serving(app)
    asgi = mount_chat(app, settings)
    # socketio.ASGIApp keeps the Socket.IO server as its engineio_server: /metrics counts its connections.
    ops_metrics(app).socketio_server = asgi.engineio_server
    return mount_mcp(app, asgi)
