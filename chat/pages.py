"""The chat page at the chatUrl: the whole conversation rendered on the server, then kept live by chat.js."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quart import Blueprint, Response, abort, render_template, request

from chat.access import Person, access_to, view_token_ok
from chat.conversation import fold, messages_of, run_metrics, status_of
from core import formatting
from core.events import events_after
from core.formatting import isoformat
from core.vocabulary import ENDING_EVENTS, EventType
from core.web.files import file_response
from core.web.headers import add_page_headers
from core.web.services import db_session, services
from core.web.sessions import current_viewer, signin_url

blueprint = Blueprint("chat", __name__)

# The browser libraries come from npm at set-up (package.json and package-lock.json pin them) and are served from
# node_modules as they are: nothing vendored into the repository, nothing to copy. Each name maps to its file.
NODE_MODULES = Path(__file__).resolve().parent.parent / "node_modules"
VENDOR_FILES: dict[str, Path] = {
    name: NODE_MODULES / package / name
    for package, names in (
        ("socket.io-client/dist", ("socket.io.min.js", "socket.io.min.js.map")),
        # The chat's Markdown: marked turns the agent's text into HTML, DOMPurify keeps only what is safe of it.
        ("marked/lib", ("marked.esm.js", "marked.esm.js.map")),
        ("dompurify/dist", ("purify.es.mjs", "purify.es.mjs.map")),
    )
    for name in names
}

# No inline script or style; sockets and fetches to our own origin only ('self' covers ws: and wss: there).
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


@blueprint.after_request
async def security_headers(response: Response) -> Response:
    # The address carries the view token: it must not leak to any other site through Referer.
    return add_page_headers(
        response, csp=CSP, referrer_policy="no-referrer", no_store=request.endpoint != "chat.vendor"
    )


@blueprint.app_template_filter("chat_duration")
def duration(ms: Any) -> str:
    return formatting.duration(ms)


@blueprint.app_template_filter("chat_clock")
def clock_filter(value: Any) -> str:
    return formatting.clock(value)

# The words chat-view.js compares against, from the one vocabulary (core/vocabulary.py) rather than a copy in
# the script: the page embeds them as a JSON data block.
SCRIPT_VOCABULARY: dict[str, dict[str, str]] = {
    "eventTypes": {member.name: member.value for member in EventType},
    "outcomes": {event.value: event.value.removeprefix("execution.") for event in sorted(ENDING_EVENTS)},
}


@blueprint.get("/chat/<execution_id>")
async def chat_page(execution_id: str) -> tuple[str, int] | str:
    token = request.args.get("token")
    viewer = await current_viewer()
    person = Person(viewer.user_id, viewer.email) if viewer is not None else None
    session = db_session()
    access = await access_to(
        session,
        execution_id,
        secret_key=services().settings.secret_key,
        person=person,
        view_token=token,
        reviewer_token=request.args.get("rt"),
    )
    if access is None:
        page = await render_template(
            "chat/denied.html",
            viewer=viewer,
            signin=signin_url(f"/chat/{execution_id}") if viewer is None and len(execution_id) <= 64 else None,
        )
        return page, 404
    execution = access.execution
    messages = messages_of(await events_after(session, execution.id))
    state = status_of(execution)
    if state["final"]:
        state["metrics"] = await run_metrics(session, execution)
    return await render_template(
        "chat/execution.html",
        viewer=viewer,
        execution=execution,
        created_at=isoformat(execution.created_at),
        items=fold(messages),
        last_seq=messages[-1]["seq"] if messages else 0,
        state=state,
        can_decide=access.can_decide,
        csrf=viewer.csrf_token if viewer is not None and access.via_session else "",
        # Handed to the script only when it is the valid one (the socket re-checks it anyway).
        token=token if token and view_token_ok(services().settings.secret_key, execution.id, token) else "",
        # The review mail's reviewer token (`rt`): handed on only when it made this watcher the decider.
        reviewer_token=request.args.get("rt") if access.can_decide and not access.via_session else "",
        vocabulary=SCRIPT_VOCABULARY,
    )


@blueprint.get("/vendor/<name>")
async def vendor(name: str) -> Response:
    path = VENDOR_FILES.get(name)
    if path is None:
        abort(404)
    return await file_response(path, max_age=3600)
