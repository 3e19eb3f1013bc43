"""Chat test helpers: executions in a chosen state, signed-in sessions, and a Socket.IO watcher."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Callable
from typing import Any, TypeVar

import socketio
import sqlalchemy as sa

from api.auth import Caller
from api.schemas import CreateTaskIn
from api.tasks import create_execution
from core.accounts import create_user, user_by_email
from core.db import Database
from core.events import append_event
from core.ids import new_id
from core.models import ApiKey, Checkpoint, Execution, User, WebSession, utcnow
from core.settings import Settings
from core.web.sessions import IDLE_LIFETIME, SESSION_COOKIE, token_digest
from tests.conftest import make_account

T = TypeVar("T")
REDIS_URL = os.environ.get("VOUCH_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
REVIEWER = "reviewer@example.com"


async def new_execution(
    db: Database,
    settings: Settings,
    *,
    owner: str | None = None,
    name: str = "Weekly digest",
    description: str = "Write a note called digest.md saying hi. Then summarise.",
    reviewer: str | None = REVIEWER,
    checkpoints: int = 1,
) -> str:
    """An execution as the create API leaves it (queued, one `execution.created` event)."""
    owner = owner or f"{new_id('owner')}@example.com"
    async with db.reading() as session:
        existing = await user_by_email(session, owner)
    if existing is None:
        await make_account(db, settings, owner)
    async with db.transaction() as session:
        user = await user_by_email(session, owner)
        assert user is not None
        key_id = await session.scalar(sa.select(ApiKey.id).where(ApiKey.user_id == user.id))
        caller = Caller(user.id, user.email, str(key_id), frozenset({"eval:manage"}))
        task = CreateTaskIn.model_validate(
            {
                "taskName": name,
                "taskDescription": description,
                "testMode": "with-verification" if checkpoints else "without-verification",
                "assignedReviewer": reviewer,
                "checkpoints": [
                    {"stage": f"Stage {n}", "description": "What to check", "verificationQuestion": "Is it right?"}
                    for n in range(1, checkpoints + 1)
                ],
            }
        )
        return (await create_execution(session, caller, task, "offline")).id


async def append(db: Database, execution_id: str, count: int = 1, type_: str = "agent.message") -> list[int]:
    """`count` events in one transaction each, as a worker commits its steps; their seqs."""
    seqs = []
    for n in range(count):
        async with db.transaction() as session:
            event = await append_event(session, execution_id, type_, {"text": f"message {n}"})
            seqs.append(event.seq)
    return seqs


async def pause_at_first_checkpoint(db: Database, execution_id: str) -> str:
    """What the worker's pause writes: the checkpoint and execution awaiting review, and the card's event."""
    async with db.transaction() as session:
        checkpoint = await session.scalar(
            sa.select(Checkpoint)
            .where(Checkpoint.execution_id == execution_id, Checkpoint.status == "pending")
            .order_by(Checkpoint.position)
            .limit(1)
        )
        assert checkpoint is not None
        checkpoint.status, checkpoint.awaiting_since = "awaiting_review", utcnow()
        await session.execute(
            sa.update(Execution).where(Execution.id == execution_id).values(status="awaiting_review")
        )
        await append_event(
            session,
            execution_id,
            "checkpoint.awaiting_review",
            {
                "checkpointId": checkpoint.id,
                "position": checkpoint.position,
                "stage": checkpoint.stage,
                "description": checkpoint.description,
                "verificationQuestion": checkpoint.verification_question,
                "origin": checkpoint.origin,
                "nextAction": {"tool": "send_email", "args": {"to": "x@example.com"}, "instruction": "send it"},
            },
        )
        return checkpoint.id


async def sign_in(db: Database, secret_key: bytes, email: str) -> tuple[str, str]:
    """A browser session for `email` (the user is made if missing): (Cookie header value, CSRF token)."""
    token = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(32)
    now = utcnow()
    async with db.transaction() as session:
        user = await user_by_email(session, email) or await create_user(session, email)
        session.add(
            WebSession(
                id=token_digest(secret_key, "session", token),
                user_id=user.id,
                csrf_token=csrf,
                created_at=now,
                last_seen_at=now,
                expires_at=now + IDLE_LIFETIME,
            )
        )
    return f"{SESSION_COOKIE}={token}", csrf


async def sign_out_everywhere(db: Database, email: str) -> None:
    async with db.transaction() as session:
        user_id = await session.scalar(sa.select(User.id).where(User.email == email))
        await session.execute(sa.delete(WebSession).where(WebSession.user_id == user_id))


class Watcher:
    """A Socket.IO client on the chat namespace; keeps the live events in order of arrival."""

    def __init__(self) -> None:
        self.client = socketio.AsyncClient(reconnection=False)
        self.live: list[dict[str, Any]] = []
        self.replayed: list[dict[str, Any]] = []
        self.refusals: list[Any] = []
        self._news = asyncio.Event()
        self.client.on("event", self._on_event, namespace="/chat")
        self.client.on("connect_error", self.refusals.append, namespace="/chat")

    def _on_event(self, message: dict[str, Any]) -> None:
        self.live.append(message)
        self._news.set()

    async def connect(
        self, base: str, *, auth: dict[str, Any] | None = None, cookie: str | None = None, origin: str | None = None
    ) -> None:
        headers = {}
        if cookie:
            headers["Cookie"] = cookie
        if origin:
            headers["Origin"] = origin
        await self.client.connect(
            base, headers=headers, auth=auth, transports=["websocket"], namespaces=["/chat"], wait_timeout=10
        )

    async def join(self, execution_id: str, after_seq: int = 0, token: str | None = None) -> dict[str, Any]:
        answer: dict[str, Any] = await self.client.call(
            "join_execution", {"executionId": execution_id, "token": token, "afterSeq": after_seq},
            namespace="/chat", timeout=15,
        )  # fmt: skip
        if answer.get("ok"):
            self.replayed.extend(answer["events"])
        return answer

    async def decide(self, execution_id: str, checkpoint_id: str, decision: str, **extra: Any) -> dict[str, Any]:
        body = {"executionId": execution_id, "checkpointId": checkpoint_id, "decision": decision, **extra}
        answer: dict[str, Any] = await self.client.call("decide_checkpoint", body, namespace="/chat", timeout=15)
        return answer

    def merged(self, execution_id: str) -> dict[int, dict[str, Any]]:
        """Replay and live together, each seq once: what a page shows."""
        found: dict[int, dict[str, Any]] = {}
        for message in (*self.replayed, *self.live):
            if message["executionId"] == execution_id:
                found.setdefault(message["seq"], message)
        return found

    async def until(self, check: Callable[[], T | None], timeout: float = 15) -> T:
        """Until `check()` returns something other than None, re-checked on each live arrival."""

        async def wait() -> T:
            while True:
                self._news.clear()
                found = check()
                if found is not None:
                    return found
                await self._news.wait()

        return await asyncio.wait_for(wait(), timeout)

    async def until_live(self, execution_id: str, seq: int, timeout: float = 15) -> None:
        """Until the live event `seq` of this execution has arrived."""
        await self.until(
            lambda: True if any(m["executionId"] == execution_id and m["seq"] == seq for m in self.live) else None,
            timeout,
        )

    async def until_seen(self, execution_id: str, seq: int, timeout: float = 15) -> None:
        """Until replay and live together hold every seq from 1 to `seq`."""
        await self.until(
            lambda: True if all(n in self.merged(execution_id) for n in range(1, seq + 1)) else None, timeout
        )

    def first(self, execution_id: str, type_: str) -> dict[str, Any] | None:
        """The first event of this type seen so far (replayed or live)."""
        merged = self.merged(execution_id)
        return next((merged[seq] for seq in sorted(merged) if merged[seq]["type"] == type_), None)

    async def close(self) -> None:
        await self.client.disconnect()
        # A refused connect leaves engine.io's HTTP session open; close it, or it is reported as leaked.
        http = getattr(self.client.eio, "http", None)
        if http is not None and not http.closed:
            await http.close()
