"""Bring your own agent over the Model Context Protocol (issue 22): `/mcp`, streamable HTTP, the official SDK.

Any MCP-capable agent asks a human through Vouch with the tool `request_approval` and writes into the live chat
with `report_progress`, on an external execution (`agentModel: "external"`) of the key's own user: one it made
with `start_run`, or one made over REST (`executionId`); `complete_run` ends it. Each tool is a
thin skin over the REST routes' functions (api/external.py): the same ownership checks, the same keys, the same
pause (review/pausing.py), the same long-poll; nothing is decided or stored here.

Stateless streamable HTTP: no MCP session lives in a web process, so any process behind a load balancer answers
any call, and a call that was cut off (a client timeout, a reconnect) is simply made again: its `key` (given, or
made from what it asks) names the same checkpoint, and the decision made meanwhile comes back at once.
Authentication is REST's: `Authorization: Bearer <API key>` with `eval:create` (or `eval:manage`), checked
before the SDK sees the request; each HTTP request counts against the key's rate limit.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import ValidationError
from quart import Quart
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse

from api.app_services import AppServices
from api.auth import Caller, caller_of, lacks_scope
from api.external import add_events, ask_checkpoint, finish, running_external, wait_for_decision
from api.external_schemas import (
    ExternalActionIn,
    ExternalCheckpointIn,
    ExternalCompleteIn,
    ExternalEventsIn,
    ExternalMessageIn,
)
from api.problems import ApiError
from api.ratelimit_http import retry_after_seconds
from api.schemas import MODEL_PROFILES, CreateTaskIn, parse_body
from api.tasks import create_execution
from core.links import chat_url
from core.model_profiles import EXTERNAL
from core.models import Execution

B = TypeVar("B")
T = TypeVar("T")

PATH = "/mcp"
SCOPE = "eval:create"
_CALLER = "vouch.caller"
# One look at the checkpoint per this many seconds at most while a call waits: a bus message lost meanwhile
# (Redis blinked) costs at most this much, and a client that asked for progress hears that we are still here.
LOOK_AGAIN_SECONDS = 30.0

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

INSTRUCTIONS = (
    "Vouch puts a human reviewer between your agent and the actions it should not take alone. Work on an "
    "external execution: start_run creates one (or use the executionId of one created over REST). Call "
    "request_approval before each such action: it returns once the reviewer decided, with the arguments to use. "
    "Call report_progress to tell the reviewer, in the live chat, what you are doing, and complete_run when done."
)


def default_checkpoint_key(stage: str, question: str, action: ExternalActionIn | None) -> str:
    """The same request again is the same checkpoint (a retried call gets its decision, never a second review)."""
    asked = json.dumps([stage, question, action.model_dump() if action else None], sort_keys=True, default=str)
    return "mcp:" + hashlib.sha256(asked.encode()).hexdigest()[:32]


def _caller(ctx: Context) -> Caller:
    request = cast(Request | None, ctx.request_context.request)
    caller = request.scope.get("state", {}).get(_CALLER) if request is not None else None
    if not isinstance(caller, Caller):  # only reachable if the endpoint below were bypassed
        raise ToolError("unauthorized: send your API key as 'Authorization: Bearer svc_eval_…'")
    return caller


def _refusal(error: ApiError) -> ToolError:
    # The REST problem's code leads, so an agent (or its model) can tell `execution_cancelled` from `not_found`.
    fields = "; ".join(f"{e.get('pointer', '')}: {e.get('detail', '')}" for e in error.errors or ())
    return ToolError(f"{error.code}: {error.detail}" + (f" ({fields})" if fields else ""))


def _invalid(error: ValidationError) -> ToolError:
    fields = ", ".join(".".join(str(part) for part in problem["loc"]) or "body" for problem in error.errors())
    return ToolError(f"validation_failed: {fields}: {error.errors()[0]['msg']}")


@contextmanager
def _tool_errors() -> Iterator[None]:
    """A body the SDK let through but our schema refuses, or a REST refusal, said as the tool's error."""
    try:
        yield
    except ValidationError as invalid:
        raise _invalid(invalid) from None
    except ApiError as refused:
        raise _refusal(refused) from None


async def _on_run(
    services: AppServices,
    caller: Caller,
    execution_id: str,
    body: Callable[[], B],
    work: Callable[[AsyncSession, Execution, B], Awaitable[T]],
) -> T:
    """Build the tool's REST body, then do `work` on the caller's running external execution in one
    transaction: what every tool but start_run does."""
    with _tool_errors():
        built = body()
        async with services.db.transaction() as session:
            execution = await running_external(session, execution_id, caller)
            return await work(session, execution, built)


def _decision(answer: dict[str, Any]) -> dict[str, Any]:
    keep = ("executionId", "checkpointId", "stage", "status", "decision", "comment", "editedArgs", "args", "by",
            "via", "at")
    return {name: answer[name] for name in keep} | {"approved": answer["decision"] == "approve"}


def build_mcp(app: Quart) -> MCPServer:
    """The MCP server and its tools; each reaches the app's services (built when the app starts serving)."""
    server = MCPServer("vouch", instructions=INSTRUCTIONS)

    def found() -> AppServices:
        services: AppServices = app.extensions["vouch"]
        return services

    @server.tool()
    async def start_run(
        taskName: str,
        taskDescription: str,
        ctx: Context,
        assignedReviewer: str | None = None,
        testMode: str = "with-verification",
        webhookUrl: str | None = None,
    ) -> dict[str, Any]:
        """Create an external execution for this agent's run (as `POST /api/eval/create-task-agent` with
        `agentModel: "external"`): returns its `executionId`, which every other tool takes, and `chatUrl`, the live
        chat to share with the reviewer. `assignedReviewer` (an e-mail address) is who is asked at checkpoints.
        Each call creates a new execution: call it once per run."""
        caller = _caller(ctx)
        services = found()
        settings = services.settings
        payload: dict[str, Any] = {"taskName": taskName, "taskDescription": taskDescription, "agentModel": EXTERNAL,
                                   "testMode": testMode}
        payload.update({name: value for name, value in (("assignedReviewer", assignedReviewer),
                                                          ("webhookUrl", webhookUrl)) if value is not None})
        with _tool_errors():
            task = parse_body(CreateTaskIn, payload, {MODEL_PROFILES: settings.model_profiles})
            async with services.db.transaction() as session:
                execution = await create_execution(
                    session, caller, task, EXTERNAL, concurrency_limit=settings.concurrency_limit
                )
        request = cast(Request, ctx.request_context.request)
        base = settings.base_url or str(request.base_url).rstrip("/")
        return {"executionId": execution.id, "chatUrl": chat_url(base, settings.secret_key, execution.id)}

    @server.tool()
    async def request_approval(
        executionId: str,
        stage: str,
        question: str,
        ctx: Context,
        action: ExternalActionIn | None = None,
        description: str = "",
        key: str | None = None,
    ) -> dict[str, Any]:
        """Ask the execution's reviewer before an action, and wait for the decision (any channel: mail, inbox,
        chat, API). Returns once a human decided: `decision` (approve or reject), `comment`, `editedArgs`, and
        `args`, the action's arguments with the reviewer's edits applied (call the tool with these). `key` names
        the checkpoint: asked again with the same key (or, without one, the same stage, question and action), it
        is the same checkpoint, so a call cut off by a timeout is simply made again."""
        services = found()

        def body() -> ExternalCheckpointIn:
            return ExternalCheckpointIn(
                key=key or default_checkpoint_key(stage, question, action),
                stage=stage,
                description=description,
                verificationQuestion=question,
                nextAction=action,
            )

        async def ask(session: AsyncSession, execution: Execution, asked: ExternalCheckpointIn) -> dict[str, Any]:
            return (await ask_checkpoint(session, services.settings, execution, asked))[0]

        answer = await _on_run(services, _caller(ctx), executionId, body, ask)
        looks = 0
        with _tool_errors():  # the wait reads the checkpoint again: a cancel meanwhile is a refusal
            while answer["decision"] is None and answer["status"] == "awaiting_review":
                answer = await wait_for_decision(
                    services.db, services.bus, executionId, answer["checkpointId"], LOOK_AGAIN_SECONDS
                )
                looks += 1
                await ctx.report_progress(looks, message="waiting for the reviewer")  # a no-op unless asked for
        if answer["decision"] is None:
            raise ToolError(f"execution_finished: execution {executionId} is {answer['executionStatus']}")
        return _decision(answer)

    @server.tool()
    async def report_progress(
        executionId: str,
        message: str,
        ctx: Context,
        key: str | None = None,
    ) -> dict[str, Any]:
        """Say something (Markdown) in the execution's live chat: the reviewer watching sees it at once. With a
        `key`, a retried call adds nothing twice; without one, each call is a new message."""
        services = found()

        def body() -> ExternalEventsIn:
            event = ExternalMessageIn(key=key or f"mcp-{uuid.uuid4().hex}", type="message", text=message)
            return ExternalEventsIn(events=[event])

        async def add(session: AsyncSession, execution: Execution, events: ExternalEventsIn) -> dict[str, Any]:
            return await add_events(session, services.settings, execution, events)

        added = await _on_run(services, _caller(ctx), executionId, body, add)
        (sent,) = added["events"]
        return {"executionId": executionId, "seq": sent["seq"], "duplicate": sent["duplicate"]}

    @server.tool()
    async def complete_run(
        executionId: str,
        ctx: Context,
        output: str = "",
        failed: bool = False,
        error: str | None = None,
    ) -> dict[str, Any]:
        """End the execution: completed with `output` (the agent's final answer, which evaluation scores), or
        `failed=true` with `error`. Sends the completion webhook. Any later call on it is refused."""
        def body() -> ExternalCompleteIn:
            return ExternalCompleteIn(
                status="failed" if failed else "completed", result=None if failed else {"output": output}, error=error
            )

        ended = await _on_run(found(), _caller(ctx), executionId, body, finish)
        return {"executionId": executionId, "status": ended["status"]}

    return server


async def _problem(error: ApiError, scope: Scope, receive: Receive, send: Send) -> None:
    response = JSONResponse(error.body(), status_code=error.status, headers=error.headers,
                            media_type="application/problem+json")
    await response(scope, receive, send)


class McpEndpoint:
    """`/mcp`: the key checked (401/403/429 as REST answers them), then the SDK's streamable HTTP transport."""

    def __init__(self, app: Quart, manager: StreamableHTTPSessionManager) -> None:
        self.app = app
        self.manager = manager

    async def _caller(self, scope: Scope) -> Caller:
        services: AppServices = self.app.extensions["vouch"]
        client = scope.get("client")
        caller = await caller_of(services, Headers(scope=scope).get("authorization"), client[0] if client else None)
        refused = lacks_scope(caller, SCOPE)
        if refused is not None:
            raise refused
        limiter = services.rate_limiter
        decision = await limiter.hit(caller.key_id)
        if not decision.allowed:
            wait = retry_after_seconds(decision)
            raise ApiError(
                429, "rate_limit_exceeded", f"this API key's requests are spent; try again in {wait} s",
                headers={"Retry-After": str(wait)},
            )
        return caller

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            caller = await self._caller(scope)
        except ApiError as refused:
            await _problem(refused, scope, receive, send)
            return
        # The tools read who called from the request's state (the SDK hands them the request).
        scope = {**scope, "state": {**scope.get("state", {}), _CALLER: caller}}
        await self.manager.handle_request(scope, receive, send)


def mount_mcp(app: Quart, inner: ASGIApp) -> ASGIApp:
    """`/mcp` served by the MCP endpoint, everything else (lifespan included) by `inner`; the SDK's session
    manager runs while the app serves."""
    server = build_mcp(app)
    # Built for its session manager; the SDK's Starlette app around it is not served (the endpoint above is).
    server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        # Vouch is reached under whatever host name its operator gives it; every request carries a key anyway.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    manager = server.session_manager
    endpoint = McpEndpoint(app, manager)
    running: dict[str, Any] = {}

    @app.before_serving
    async def start_mcp() -> None:
        stop, ready = asyncio.Event(), asyncio.Event()

        async def run() -> None:
            async with manager.run():
                ready.set()
                await stop.wait()

        task = asyncio.create_task(run())
        started = asyncio.create_task(ready.wait())
        await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            started.cancel()
            task.result()  # the manager failed to start: say why
        running.update(stop=stop, task=task)

    @app.after_serving
    async def stop_mcp() -> None:
        if "task" in running:
            running["stop"].set()
            await running.pop("task")

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].rstrip("/") == PATH:
            await endpoint(scope, receive, send)
        else:
            await inner(scope, receive, send)

    return dispatch
