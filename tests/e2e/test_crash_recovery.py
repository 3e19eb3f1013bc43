"""Crash safety, first proof: kill -9 a worker mid-run; another resumes it, sending nothing twice."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from email.message import Message
from email.parser import BytesParser
from typing import Any

import pytest
import sqlalchemy as sa
from aiosmtpd.controller import Controller

from agents.offline_plan import plan_task
from api.schemas import CreateTaskIn
from api.tasks import create_execution
from core.db import Database
from core.models import Event, Execution, MailMessage, ToolCall
from core.settings import Settings
from tests.conftest import make_account
from tests.support.ports import free_port
from tests.support.processes import running_worker
from tests.support.waiting import until

TASK = (
    'Send an email to first@example.com with subject "One" and body "first". '
    "Then wait 2 seconds. "
    'Then send an email to second@example.com with subject "Two" and body "second". '
    'Then write a note saying "done".'
)


class _Inbox:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.lock:
            self.messages.append(BytesParser().parsebytes(envelope.original_content))
        return "250 OK"

    def recipients(self) -> list[str]:
        with self.lock:
            return sorted(str(m["To"]) for m in self.messages)


@pytest.fixture
def smtp_server() -> Iterator[tuple[_Inbox, int]]:
    port = free_port()
    inbox = _Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield inbox, port
    finally:
        controller.stop()


async def test_worker_killed_mid_run_is_resumed_by_another_without_resending(
    settings: Settings, db: Database, smtp_server: tuple[_Inbox, int]
) -> None:
    assert [s.tool for s in plan_task(TASK).steps] == ["send_email", "wait", "send_email", "write_file"]
    inbox, port = smtp_server
    account = await make_account(db, settings, "ops@example.com", "eval:manage")
    async with db.transaction() as session:
        execution = await create_execution(
            session,
            account.caller(),
            CreateTaskIn(taskName="crash", taskDescription=TASK, testMode="without-verification"),
            "offline",
        )
    worker_env = {
        "VOUCH_SMTP_URL": f"smtp://127.0.0.1:{port}",
        "VOUCH_WORKER_LEASE_SECONDS": "1.5",
        "VOUCH_WORKER_POLL_SECONDS": "0.2",
    }

    async def first_mail_sent_and_waiting() -> bool | None:
        async with db.reading() as session:
            sent = await session.scalar(
                sa.select(sa.func.count()).where(MailMessage.execution_id == execution.id, MailMessage.status == "sent")
            )
            waiting = await session.scalar(
                sa.select(ToolCall.status).where(ToolCall.execution_id == execution.id, ToolCall.tool == "wait")
            )
        return True if sent == 1 and waiting == "started" else None

    with running_worker(settings, "first", **worker_env) as first:
        await until(first_mail_sent_and_waiting, timeout=30)
        os.kill(first.pid, signal.SIGKILL)
        assert first.wait(timeout=10) == -signal.SIGKILL

    async with db.reading() as session:
        crashed = await session.get_one(Execution, execution.id)
        assert crashed.status == "running" and crashed.worker_id is not None
        first_worker = crashed.worker_id
    assert inbox.recipients() == ["first@example.com"]

    with running_worker(settings, "second", **worker_env):

        async def finished() -> str | None:
            async with db.reading() as session:
                row = await session.get_one(Execution, execution.id)
                await session.refresh(row)
                return row.status if row.status in ("completed", "failed") else None

        assert await until(finished, timeout=30) == "completed"

        async def both_delivered() -> bool | None:
            return True if len(inbox.recipients()) >= 2 else None

        await until(both_delivered, timeout=15)

    assert inbox.recipients() == ["first@example.com", "second@example.com"]
    async with db.reading() as session:
        calls = (
            await session.execute(
                sa.select(ToolCall.step_index, ToolCall.tool, ToolCall.status)
                .where(ToolCall.execution_id == execution.id)
                .order_by(ToolCall.step_index)
            )
        ).all()
        resumed = await session.scalars(
            sa.select(Event.payload).where(Event.execution_id == execution.id, Event.type == "execution.resumed")
        )
        resumed_by = [payload["worker"] for payload in resumed]
        mails = await session.scalar(sa.select(sa.func.count()).where(MailMessage.execution_id == execution.id))
    assert [tuple(c) for c in calls] == [
        (0, "send_email", "succeeded"),
        (1, "wait", "succeeded"),
        (2, "send_email", "succeeded"),
        (3, "write_file", "succeeded"),
    ]
    assert mails == 2
    assert len(resumed_by) == 1 and resumed_by[0] != first_worker
