"""Helpers for the review-by-mail tests: a paused run with its review mail, tokens out of the mail,
and an aiosmtpd server on a free port (its Controller cannot take port 0)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa
from aiosmtpd.controller import Controller

from core.models import Checkpoint, Decision, Execution, MailMessage
from tests.api.helpers import account, create_ok, paused_at, task, wait_for
from tests.conftest import Service
from tests.support.ports import free_port

REVIEWER = "reviewer@example.com"
OWNER = "owner@example.com"
LINK = re.compile(r"(https?://[^\s\"<>]+/review/link/([A-Za-z0-9_\-]+))")
REPLY_TAG = re.compile(r"\[vouch:([0-9a-f]+)\]")
CHAT_LINK = re.compile(r"https?://[^\s\"<>]+(/chat/[^\s\"<>?]+\?token=[A-Za-z0-9_\-=]+&(?:amp;)?rt=([A-Za-z0-9_\-]+))")


@dataclass
class Paused:
    execution_id: str
    checkpoint_id: str
    key: str


async def paused_run(service: Service, description: str = 'Write a note called plan.md saying "ship it".') -> Paused:
    owner = await account(service, OWNER, "eval:manage")
    execution_id = await create_ok(
        service,
        owner.key,
        task(
            taskDescription=description,
            assignedReviewer=REVIEWER,
            checkpoints=[
                {"stage": "Draft note", "description": "The plan is written", "verificationQuestion": "Write it?"}
            ],
        ),
    )
    record = await wait_for(service, owner.key, execution_id, paused_at(0))
    return Paused(execution_id, record["checkpoints"][0]["checkpointId"], owner.key)


async def review_mail(service: Service, execution_id: str) -> MailMessage:
    async with service.db.reading() as session:
        (message,) = await session.scalars(
            sa.select(MailMessage).where(
                MailMessage.execution_id == execution_id, MailMessage.message_key.like("review:%")
            )
        )
        return message


def links_in(text: str) -> dict[str, str]:
    """The paths of the Approve and Reject links, in the order the mail lists them (Approve first)."""
    found = [urlsplit(url).path for url, _ in LINK.findall(text)]
    assert len(found) == 2, text
    return {"approve": found[0], "reject": found[1]}


def chat_link_in(text: str) -> tuple[str, str]:
    """The review mail's chat link (path and query) and its `rt` review token."""
    found = CHAT_LINK.search(text)
    assert found is not None, text
    return found.group(1).replace("&amp;", "&"), found.group(2)


async def checkpoint_row(service: Service, checkpoint_id: str) -> Checkpoint:
    async with service.db.reading() as session:
        return await session.get_one(Checkpoint, checkpoint_id)


async def decisions(service: Service, checkpoint_id: str) -> list[Decision]:
    async with service.db.reading() as session:
        return list(await session.scalars(sa.select(Decision).where(Decision.checkpoint_id == checkpoint_id)))


async def execution_status(service: Service, execution_id: str) -> str:
    async with service.db.reading() as session:
        return str(await session.scalar(sa.select(Execution.status).where(Execution.id == execution_id)))


class Sink:
    """An SMTP server's handler that keeps what it receives and tells the test's loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.envelopes: list[Any] = []
        # (time.monotonic() of the 250, envelope), one tuple per append so a reader in another thread never
        # pairs a time with the wrong message: how far apart a message's copies came tells a resend's cause.
        self.arrivals: list[tuple[float, Any]] = []
        self.arrived = asyncio.Event()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.arrivals.append((time.monotonic(), envelope))
        self.envelopes.append(envelope)
        self.loop.call_soon_threadsafe(self.arrived.set)
        return "250 OK"


@contextmanager
def smtp_sink(loop: asyncio.AbstractEventLoop) -> Iterator[tuple[Sink, int]]:
    sink = Sink(loop)
    port = free_port()
    controller = Controller(sink, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield sink, port
    finally:
        controller.stop()
