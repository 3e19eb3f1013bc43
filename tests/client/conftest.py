"""A real Vouch (web app and worker, on a free port) and an account whose key the client uses."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from core.bus import InProcessBus
from core.db import Database
from core.settings import Settings
from tests.conftest import Account, make_account
from tests.support.live import live_server

OWNER = "caller@example.com"


async def make_accounts(settings: Settings, *wanted: tuple[str, tuple[str, ...]]) -> list[Account]:
    """Users with one key each, made in the service's database before (or while) it serves."""
    database = Database(settings.database_url, InProcessBus())
    try:
        return [await make_account(database, settings, email, *scopes) for email, scopes in wanted]
    finally:
        await database.dispose()


def accounts(settings: Settings, *wanted: tuple[str, tuple[str, ...]]) -> list[Account]:
    return asyncio.run(make_accounts(settings, *wanted))


@dataclass
class Vouch:
    base: str
    settings: Settings
    owner: Account

    def account(self, email: str, *scopes: str) -> Account:
        return accounts(self.settings, (email, scopes))[0]


@pytest.fixture
def client_settings(settings: Settings) -> Settings:
    # No configured base URL: chat links and the socket's origin are the live server's own address.
    return settings.with_changes(base_url=None)


@pytest.fixture
def vouch(client_settings: Settings) -> Iterator[Vouch]:
    owner = accounts(client_settings, (OWNER, ("eval:manage",)))[0]
    with live_server(client_settings, run_worker=True) as base:
        yield Vouch(base, client_settings, owner)


def reviewed_task(reviewer: str = OWNER, **extra: object) -> dict[str, object]:
    """A task that stops at one checkpoint before it sends mail."""
    return {
        "taskName": "Release note",
        "taskDescription": 'Write a note called "notes.md" saying "v2 is out". '
        'Then send an email to team@example.com with subject "v2" and body "v2 is out". Then summarise.',
        "testMode": "with-verification",
        "assignedReviewer": reviewer,
        "checkpoints": [{"stage": "Send", "description": "Mail to the team", "verificationQuestion": "Send it?"}],
        **extra,
    }


def plain_task(name: str = "Plain run") -> dict[str, object]:
    return {
        "taskName": name,
        "taskDescription": 'Write a note called "a.md" saying "hello". Then summarise.',
        "testMode": "without-verification",
    }
