"""The chat's Socket.IO namespace: authenticated connect, authorised joins with replay, decisions from cards.

Protocol (namespace "/chat", websocket transport only):

- connect with `auth = {executionId, token}` (the chat link's view token), with the session cookie, or with
  an API key holding eval:read (`Authorization: Bearer …` or `auth = {apiKey}`; it watches its own user's
  executions only, see chat/apikey.py); anything else is refused (the client sees it in `connect_error`).
- `join_execution {executionId, token?, afterSeq}` re-checks who may watch, enters the execution's room,
  and answers with the events whose seq is above `afterSeq` (a page at a time: `more` says ask again), the
  status line and what this watcher may do. Live events (`event`) follow in the room. The client joins
  first and replays second, so nothing committed in between is lost; it drops seqs it already has and
  orders the rest, so nothing shows twice.
- `watch_lists {}` (a signed-in session only) enters the rooms of this user's lists and answers how many reviews
  wait for them; `lists` (no content) follows whenever one of their executions moves (chat/lists.py), and the page
  fetches itself again with its own session.
- `decide_checkpoint {executionId, checkpointId, decision, comment, editedArgs?, csrf}` calls review.decide
  with via="chat" for the assigned reviewer only, and answers ok or why not ("already approved by … via …
  at …"; for an edited argument the tool would refuse, `argument` names it).

Why the socket needs no other CSRF defence than the token it checks: the handshake is refused from any
origin but our own (cors_allowed_origins), browsers send the SameSite=Lax session cookie on no cross-site
websocket, and a decision made through a session must also carry that session's CSRF token (from the page).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlsplit

import socketio
from quart import Quart

from chat.access import MAX_TOKEN, Access, Person, access_to, view_token_ok
from chat.apikey import key_access, key_id_for, presented_key
from chat.conversation import run_metrics, status_of
from chat.fanout import (
    LIST_ROOM_PREFIX,
    NAMESPACE,
    QueuedRoomSink,
    RoomSink,
    listen_before_serving,
    room_of,
    server_manager,
)
from chat.lists import ListNotifier, owner_room, reviewer_room
from core.db import Database
from core.event_messages import event_message
from core.events import events_after
from core.models import Checkpoint, Execution, utcnow
from core.redis_bus import RedisBus
from core.settings import Settings
from core.vocabulary import Channel
from core.web.sessions import current_viewer
from review import DecisionError, InvalidInput, decide
from review.by_mail import LinkRefused, decide_by_link
from review.decisions import Verdict
from review.inbox import waiting_for

log = logging.getLogger(__name__)

REPLAY_PAGE = 500
MAX_COMMENT = 5000
MAX_ID = 64


class Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def answer(self) -> dict[str, Any]:
        return {"ok": False, "error": self.code, "message": self.message}


def forbidden() -> Refused:
    return Refused("forbidden", "This chat link is not valid, or you may not watch this execution.")


def _text(data: dict[str, Any], name: str, limit: int, *, required: bool = True) -> str | None:
    value = data.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > limit:
        raise Refused("invalid", f"{name} is missing or not valid")
    return value


def _object(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise Refused("invalid", "send an object")
    return data


class ChatNamespace(socketio.AsyncNamespace):  # type: ignore[misc]
    def __init__(self, app: Quart, settings: Settings) -> None:
        super().__init__(NAMESPACE)
        self.app = app
        self.settings = settings

    @property
    def db(self) -> Database:
        return cast(Database, self.app.extensions["vouch"].db)

    async def _signed_in(self, cookie: str | None) -> tuple[Person | None, str | None]:
        """The signed-in user behind a Cookie header, and the session's CSRF token; checked afresh each time.

        The lookup is the web pages' own (core.web.sessions), run in a request context built from the
        handshake's cookies, so expiry, sign-out and sliding behave exactly as they do for pages."""
        if not cookie:
            return None, None
        async with self.app.test_request_context("/chat", headers={"Cookie": cookie}):
            viewer = await current_viewer()
        if viewer is None:
            return None, None
        return Person(viewer.user_id, viewer.email), viewer.csrf_token

    async def on_connect(self, sid: str, environ: dict[str, Any], auth: Any = None) -> None:
        cookie = environ.get("HTTP_COOKIE") or None
        person, _ = await self._signed_in(cookie)
        token_ok = False
        if isinstance(auth, dict) and isinstance(auth.get("executionId"), str) and isinstance(auth.get("token"), str):
            token_ok = view_token_ok(self.settings.secret_key, auth["executionId"], auth["token"])
        key_id = None
        if person is None and not token_ok and (secret := presented_key(environ, auth)) is not None:
            # Programmatic watchers (vouch_client) connect with their API key (chat/apikey.py).
            async with self.db.reading() as session:
                key_id = await key_id_for(session, secret, self.settings.secret_key)
        if person is None and not token_ok and key_id is None:
            raise socketio.exceptions.ConnectionRefusedError("unauthorized")
        client = environ.get("asgi.scope", {}).get("client") or (None,)
        await self.save_session(sid, {"cookie": cookie if person else None, "addr": client[0], "apiKeyId": key_id})

    async def _access(self, session: Any, data: dict[str, Any], person: Person | None) -> Access:
        access = await access_to(
            session,
            cast(str, _text(data, "executionId", MAX_ID)),
            secret_key=self.settings.secret_key,
            person=person,
            view_token=_text(data, "token", MAX_TOKEN, required=False),
            reviewer_token=_text(data, "reviewerToken", MAX_TOKEN, required=False),
        )
        if access is None:
            raise forbidden()
        return access

    async def _who(self, sid: str) -> tuple[Person | None, str | None, dict[str, Any]]:
        # Before any transaction of ours: the session lookup may write (sliding expiry), and on SQLite a
        # write beside our own open write transaction would wait for it forever.
        state: dict[str, Any] = await self.get_session(sid)
        person, csrf = await self._signed_in(state.get("cookie"))
        return person, csrf, state

    async def on_join_execution(self, sid: str, data: Any) -> dict[str, Any]:
        try:
            return await self._join(sid, _object(data))
        except Refused as refused:
            if refused.code == "forbidden" and isinstance(data, dict) and isinstance(data.get("executionId"), str):
                # Authorisation is re-checked on every join: one that fails ends the watching.
                await self.leave_room(sid, room_of(data["executionId"][:MAX_ID]))
            return refused.answer()
        except Exception:
            log.exception("chat join failed")
            return {"ok": False, "error": "internal", "message": "Something went wrong; reload the page."}

    async def _join(self, sid: str, data: dict[str, Any]) -> dict[str, Any]:
        after = data.get("afterSeq", 0)
        if not isinstance(after, int) or isinstance(after, bool) or after < 0:
            raise Refused("invalid", "afterSeq must be a whole number, 0 or more")
        person, _, state = await self._who(sid)
        async with self.db.reading() as session:
            if state.get("apiKeyId") and person is None:
                # The key is checked again on every join: revoked or expired, it watches no more.
                found = await key_access(session, state["apiKeyId"], cast(str, _text(data, "executionId", MAX_ID)))
                if found is None:
                    raise forbidden()
                access = found
            else:
                access = await self._access(session, data, person)
        execution_id = access.execution.id
        # In the room before reading, and reading in a transaction begun after that (SQLite holds a read
        # transaction's snapshot from its first statement): whatever commits after the read arrives live,
        # and the client drops what the read already had.
        await self.enter_room(sid, room_of(execution_id))
        async with self.db.reading() as session:
            execution = await session.get_one(Execution, execution_id)
            rows = await events_after(session, execution_id, after, limit=REPLAY_PAGE + 1)
            state = status_of(execution)
            if state["final"]:
                state["metrics"] = await run_metrics(session, execution)
        return {
            "ok": True,
            "events": [event_message(row) for row in rows[:REPLAY_PAGE]],
            "more": len(rows) > REPLAY_PAGE,
            "state": state,
            "canDecide": access.can_decide,
        }

    async def on_watch_lists(self, sid: str, data: Any = None) -> dict[str, Any]:
        """A signed-in page's lists: checked afresh on every call (the page calls again after each `lists`)."""
        person, _, _ = await self._who(sid)
        if person is None:
            for room in self.rooms(sid):
                if room.startswith(LIST_ROOM_PREFIX):
                    await self.leave_room(sid, room)
            return forbidden().answer()
        await self.enter_room(sid, owner_room(person.user_id))
        await self.enter_room(sid, reviewer_room(person.email))
        async with self.db.reading() as session:
            waiting = len(await waiting_for(session, person.email, utcnow()))
        return {"ok": True, "waiting": waiting}

    async def on_decide_checkpoint(self, sid: str, data: Any) -> dict[str, Any]:
        try:
            return await self._decide(sid, _object(data))
        except Refused as refused:
            return refused.answer()
        except InvalidInput as exc:
            # `argument` lets the card show the message beside the edited field it is about.
            return {"ok": False, "error": exc.code, "message": str(exc), "argument": exc.argument}
        except DecisionError as exc:
            return {"ok": False, "error": exc.code, "message": str(exc)}
        except Exception:
            log.exception("chat decision failed")
            return {"ok": False, "error": "internal", "message": "Something went wrong; the decision was not saved."}

    async def _decide(self, sid: str, data: dict[str, Any]) -> dict[str, Any]:
        checkpoint_id = cast(str, _text(data, "checkpointId", MAX_ID))
        decision = data.get("decision")
        if decision not in ("approve", "reject"):
            raise Refused("invalid", "decision must be approve or reject")
        comment = data.get("comment") or ""
        if not isinstance(comment, str) or len(comment) > MAX_COMMENT:
            raise Refused("invalid", f"the comment must be text of at most {MAX_COMMENT} characters")
        edited = data.get("editedArgs")
        if edited is not None and not (
            isinstance(edited, dict) and all(isinstance(name, str) and len(name) <= MAX_ID for name in edited)
        ):
            raise Refused("invalid", "editedArgs must be an object of arguments")
        # Issue 23: an optional 1-5 rating and labels; review.decide checks them (InvalidInput, said as such).
        grade = {"rating": data.get("rating"), "labels": data.get("labels")}
        person, csrf, state = await self._who(sid)
        async with self.db.transaction() as session:
            access = await self._access(session, data, person)
            if access.decider is None:
                raise Refused("not_assigned_reviewer", "Only the assigned reviewer may decide this checkpoint.")
            sent = data.get("csrf")
            if access.via_session and not (
                isinstance(sent, str) and csrf is not None and hmac.compare_digest(sent.encode(), csrf.encode())
            ):
                raise Refused("csrf", "This page's security token is out of date. Reload the page and try again.")
            checkpoint = await session.get(Checkpoint, checkpoint_id)
            if checkpoint is None or checkpoint.execution_id != access.execution.id:
                raise Refused("not_found", "There is no such checkpoint in this execution.")
            verdict: Verdict = "approve" if decision == "approve" else "reject"
            if access.review_link is not None:
                link = access.review_link
                if link.checkpoint_id != checkpoint_id:
                    raise Refused("not_assigned_reviewer", "The review mail's link decides only its own checkpoint.")
                try:
                    record = await decide_by_link(
                        session,
                        link,
                        verdict,
                        comment=comment.strip(),
                        remote_addr=state.get("addr"),
                        via=Channel.CHAT,
                        edited_args=edited,
                        **grade,
                    )
                except LinkRefused as refused:
                    if isinstance(refused.__cause__, DecisionError):
                        raise refused.__cause__ from None  # e.g. already decided: said as every channel says it
                    raise Refused("link_" + refused.state.status, "This review link no longer decides.") from None
            else:
                # review.decide checks the rule again on the locked execution row: a reviewer replaced since the
                # access check above is refused (NotReviewer), and raising rolls it all back.
                record = await decide(
                    session,
                    checkpoint_id,
                    verdict,
                    by=access.decider,
                    via=Channel.CHAT,
                    comment=comment.strip(),
                    remote_addr=state.get("addr"),
                    edited_args=edited,
                    **grade,
                )
        return {"ok": True, "decision": record.as_json()}


def own_origin(settings: Settings) -> Callable[[str, dict[str, Any]], bool]:
    """Only our own pages may open a socket: the configured public address, else the request's own host.

    (python-engineio's built-in same-origin check takes the scheme from X-Forwarded-Proto alone, so behind
    no proxy it would refuse an https page; this one reads the websocket's own scheme too.)"""
    configured = urlsplit(settings.base_url) if settings.base_url else None

    def allowed(origin: str, environ: dict[str, Any]) -> bool:
        if configured is not None:
            return origin == f"{configured.scheme}://{configured.netloc}"
        host = environ.get("HTTP_HOST")
        if not host:
            return False
        scheme = {"ws": "http", "wss": "https"}.get(environ.get("asgi.scope", {}).get("scheme"), "http")
        schemes = {scheme}
        forwarded = environ.get("HTTP_X_FORWARDED_PROTO")
        if forwarded:
            schemes.add(forwarded.split(",")[0].strip())
        return origin in {f"{s}://{host}" for s in schemes}

    return allowed


def make_server(settings: Settings) -> socketio.AsyncServer:
    return socketio.AsyncServer(
        async_mode="asgi",
        client_manager=server_manager(settings.redis_url),
        cors_allowed_origins=own_origin(settings),
        # Several web processes behind a balancer need no sticky sessions with websocket alone.
        transports=["websocket"],
        max_http_buffer_size=64 * 1024,
    )


def mount_chat(app: Quart, settings: Settings) -> socketio.ASGIApp:
    """Socket.IO beside the Quart app; committed events flow into its rooms once the app serves."""
    server = make_server(settings)
    server.register_namespace(ChatNamespace(app, settings))
    sink: QueuedRoomSink | RoomSink = RoomSink(server)
    server.manager.heard = ListNotifier(server, lambda: cast(Database, app.extensions["vouch"].db)).heard

    @app.before_serving
    async def start_chat() -> None:
        nonlocal sink
        # Registered after create_app's own start-up, so the Database, its bus (and an embedded worker) exist.
        services = app.extensions["vouch"]
        if isinstance(services.bus, RedisBus):
            # With Redis an emit is a publish (the local rooms hear it back from Redis): no commit should wait for
            # it. It goes out on the bus's connection, in the same write as the bus's messages of its commit.
            sink = QueuedRoomSink(server.manager, services.bus.publisher, local=True)
        services.db.add_event_sink(sink)
        await listen_before_serving(server)

    @app.after_serving
    async def stop_chat() -> None:
        found = app.extensions.get("vouch")
        if found is not None:
            found.db.remove_event_sink(sink)
        if isinstance(sink, QueuedRoomSink):
            await sink.close()
        listener = getattr(server.manager, "thread", None)
        if listener is not None:
            listener.cancel()
        redis = getattr(server.manager, "redis", None)
        if redis is not None:
            await redis.aclose()

    # No on_startup here: ASGIApp would then keep the lifespan to itself and Quart's before_serving never runs.
    return socketio.ASGIApp(server, other_asgi_app=app)
