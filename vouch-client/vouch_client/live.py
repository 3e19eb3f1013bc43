"""Following an execution's events live: the chat's Socket.IO namespace, joined with an API key.

Protocol (chat/socket.py): connect to namespace /chat over websocket with `Authorization: Bearer <key>`, then
`join_execution {executionId, afterSeq}` answers the stored events after `afterSeq` (a page at a time: `more`)
and the execution's state; live `event` messages follow in the room. Events are rows before they are messages,
so the stored ones fill any gap: this module yields each seq once and in order, asks again when a gap stays open,
and after a dropped connection reconnects and joins again after the last seq it yielded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

import socketio

from vouch_client.errors import StreamError
from vouch_client.models import Event

log = logging.getLogger("vouch.client")

NAMESPACE = "/chat"
GAP_WAIT = 2.0  # seconds a missing seq may stay missing before the stored events are asked for
CALL_TIMEOUT = 15.0


class _Refused(StreamError):
    """The server said no (bad key, not our execution): reconnecting would not help."""


class _Connection:
    """One Socket.IO connection; what it receives goes into a queue, in order of arrival."""

    def __init__(self) -> None:
        self.sio = socketio.AsyncClient(reconnection=False)
        self.inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.refusals: list[Any] = []
        self.sio.on("event", lambda message: self.inbox.put_nowait(("event", message)), namespace=NAMESPACE)
        self.sio.on("disconnect", lambda *_: self.inbox.put_nowait(("disconnect", None)), namespace=NAMESPACE)
        self.sio.on("connect_error", self.refusals.append, namespace=NAMESPACE)

    async def open(self, base_url: str, api_key: str) -> None:
        try:
            await self.sio.connect(
                base_url,
                headers={"Authorization": f"Bearer {api_key}"},
                transports=["websocket"],
                namespaces=[NAMESPACE],
                wait_timeout=10,
            )
        except socketio.exceptions.ConnectionError as exc:
            # A refusal by the namespace arrives as connect_error with the server's message.
            if any("unauthorized" in str(refusal) for refusal in self.refusals):
                raise _Refused("the live stream refused this API key (it needs eval:read)") from exc
            raise StreamError(f"could not connect to the live stream: {exc}") from exc

    async def join(self, execution_id: str, after_seq: int) -> dict[str, Any]:
        try:
            answer: Any = await self.sio.call(
                "join_execution",
                {"executionId": execution_id, "afterSeq": after_seq},
                namespace=NAMESPACE,
                timeout=CALL_TIMEOUT,
            )
        except (socketio.exceptions.TimeoutError, socketio.exceptions.BadNamespaceError) as exc:
            raise StreamError(f"join of {execution_id} failed: {exc!r}") from exc
        if not isinstance(answer, dict) or not answer.get("ok"):
            message = answer.get("message") if isinstance(answer, dict) else answer
            raise _Refused(f"the live stream refused {execution_id}: {message}")
        return answer

    async def close(self) -> None:
        await self.sio.disconnect()
        # A connection that failed leaves engine.io's HTTP session open; close it so nothing leaks.
        http = getattr(self.sio.eio, "http", None)
        if http is not None and not http.closed:
            await http.close()


class _Ordered:
    """Events by seq: each released once, in order, only when every earlier seq has been released."""

    def __init__(self, after_seq: int) -> None:
        self.last = after_seq
        self.held: dict[int, Event] = {}

    def add(self, raw: Any) -> None:
        event = Event.model_validate(raw)
        if event.seq > self.last:
            self.held.setdefault(event.seq, event)

    def release(self) -> list[Event]:
        ready = []
        while (event := self.held.pop(self.last + 1, None)) is not None:
            ready.append(event)
            self.last = event.seq
        return ready

    @property
    def gap(self) -> bool:
        return bool(self.held)


async def _replay(conn: _Connection, execution_id: str, order: _Ordered) -> dict[str, Any]:
    """Join (again) and take the stored events after what we have; the state from the last page."""
    answer = await conn.join(execution_id, order.last)
    while True:
        for raw in answer.get("events", []):
            order.add(raw)
        if not answer.get("more"):
            return answer
        newest = max((int(raw["seq"]) for raw in answer["events"]), default=order.last)
        answer = await conn.join(execution_id, newest)


async def follow(
    base_url: str, api_key: str, execution_id: str, *, after_seq: int = 0, reconnect_for: float = 30.0
) -> AsyncGenerator[Event, None]:
    """Yield the execution's events after `after_seq`, each once and in order, until its final event."""
    order = _Ordered(after_seq)
    # Never connected: the stream is not available here (a proxy without websockets); say so at once, so that
    # wait() polls instead. Once it worked, a break is a blip (a restart) and worth reconnecting for.
    failing_since: float | None = time.monotonic() - reconnect_for
    pause = 0.2
    while True:
        conn = _Connection()
        try:
            await conn.open(base_url, api_key)
            state = (await _replay(conn, execution_id, order)).get("state") or {}
            failing_since, pause = None, 0.2
            while True:
                for event in order.release():
                    yield event
                    if event.outcome is not None:
                        return
                if state.get("final") and not order.gap and order.last >= int(state.get("lastSeq", 0)):
                    return  # finished before we came, and we have everything (a stream begun after the end)
                state = {}
                try:
                    kind, message = await asyncio.wait_for(conn.inbox.get(), GAP_WAIT if order.gap else None)
                except TimeoutError:
                    # A missing seq did not arrive live (a lost message): the database has it.
                    state = (await _replay(conn, execution_id, order)).get("state") or {}
                    continue
                if kind == "disconnect":
                    raise StreamError("the live stream disconnected")
                order.add(message)
        except _Refused:
            raise
        except StreamError as exc:
            now = time.monotonic()
            failing_since = failing_since or now
            if now - failing_since > reconnect_for:
                raise StreamError(f"live stream lost for {reconnect_for:g} s: {exc}") from exc
            log.info("live stream: %s; reconnecting after seq %d", exc, order.last)
        finally:
            await conn.close()
        await asyncio.sleep(pause)
        pause = min(2.0, pause * 2)
