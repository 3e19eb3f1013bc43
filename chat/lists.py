"""The live lists: the review inbox, the executions list and the navigation's review count, told when they change.

Every event a web process delivers passes its Socket.IO manager (chat/_socketio_shortcuts.py), whether it was
committed here or arrived through Redis from a worker. Those that move an execution between lists (created,
started, waiting for review, decided, ended, scored, reassigned) reach every web process where someone has a list
open (chat/fanout.py `MOVES_BETWEEN_LISTS`, `LISTS_HEARD`), and are heard here; once per turn the executions concerned
are looked up, and a ping without content goes to the rooms of their owner and their reviewers. The page then
fetches itself again over HTTP, with its own session: what anyone sees is what the page would show them, under the
page's own authorisation, and the ping says nothing but "something of yours changed".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import socketio
import sqlalchemy as sa

from chat.fanout import EVENT, LIST_ROOM_PREFIX, MOVES_BETWEEN_LISTS, NAMESPACE
from core.db import Database
from core.models import Execution
from core.vocabulary import EventType

log = logging.getLogger(__name__)

LISTS = "lists"


def owner_room(user_id: str) -> str:
    return f"{LIST_ROOM_PREFIX}user:{user_id}"


def reviewer_room(email: str) -> str:
    return f"{LIST_ROOM_PREFIX}reviewer:{email.strip().lower()}"


class ListNotifier:
    """Hears delivered events (`heard`, called by the manager for each) and pings the lists they change."""

    def __init__(self, server: socketio.AsyncServer, db: Callable[[], Database]) -> None:
        self._server = server
        self._db = db
        self._pending: dict[str, set[str]] = {}  # execution id → reviewers named in its events (a reassignment's)
        self._task: asyncio.Task[None] | None = None

    def heard(self, event: str, data: Any) -> None:
        if event != EVENT or not isinstance(data, dict) or data.get("type") not in MOVES_BETWEEN_LISTS:
            return
        named = self._pending.setdefault(str(data["executionId"]), set())
        payload = data.get("payload") or {}
        for field in ("from", "to"):  # a reassignment: the one who had it and the one who has it now
            if data["type"] == EventType.EXECUTION_UPDATED and isinstance(payload.get(field), str):
                named.add(payload[field])
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._ping(), name="chat-lists")

    def _watched(self) -> bool:
        rooms = self._server.manager.rooms.get(NAMESPACE, {})
        return any(
            isinstance(room, str) and room.startswith(LIST_ROOM_PREFIX) and members for room, members in rooms.items()
        )

    async def _ping(self) -> None:
        await asyncio.sleep(0)  # the rest of this turn's events join the batch
        while self._pending:
            batch, self._pending = self._pending, {}
            if not self._watched():
                continue  # nobody has a list open in this process: no lookup
            try:
                rooms: set[str] = set()
                async with self._db().reading() as session:
                    rows = await session.execute(
                        sa.select(Execution.user_id, Execution.assigned_reviewer, Execution.backup_reviewer).where(
                            Execution.id.in_(batch)
                        )
                    )
                    for user_id, reviewer, backup in rows.all():
                        rooms.add(owner_room(user_id))
                        rooms.update(reviewer_room(email) for email in (reviewer, backup) if email)
                for named in batch.values():
                    rooms.update(reviewer_room(email) for email in named)
                for room in sorted(rooms):
                    # Here only: every web process with a list open hears every list-moving event and pings its own
                    # watchers.
                    await self._server.emit(LISTS, {}, namespace=NAMESPACE, room=room, ignore_queue=True)
            except Exception:
                log.warning("chat: pinging the live lists failed", exc_info=True)
