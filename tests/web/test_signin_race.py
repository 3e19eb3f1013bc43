"""The sign-in throttle under simultaneous attempts, over real HTTP, on one and on two web processes.

Each attempt takes its place in the count (a SigninFailure row) before its password is checked, so a burst
cannot have more than the limit checked, and a right password sent while the burst is being checked is
refused like any other try past the limit.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from contextlib import ExitStack

import httpx
import sqlalchemy as sa

from api.signin import ADDRESS_LIMIT, EMAIL_LIMIT
from core.accounts import create_user
from core.db import Database
from core.models import SigninFailure, WebSession
from core.settings import Settings
from core.web.sessions import PRESESSION_COOKIE, SESSION_COOKIE
from tests.support.live import live_server
from tests.support.waiting import until

PASSWORD = "correct horse battery"
BURST = 24
_CSRF = re.compile(r'name="csrf_token" value="([^"]*)"')


class Signer:
    """One browser's pre-session (cookie and CSRF token), sending sign-ins to one or more servers in turn."""

    def __init__(self, client: httpx.AsyncClient, bases: list[str]) -> None:
        self.client = client
        self.bases = itertools.cycle(bases)
        self.first = bases[0]
        self.cookie = ""
        self.csrf = ""

    async def start(self) -> None:
        page = await self.client.get(f"{self.first}/signin")
        assert page.status_code == 200, page.text
        self.cookie = page.cookies[PRESESSION_COOKIE]
        found = _CSRF.search(page.text)
        assert found is not None
        self.csrf = found.group(1)

    async def sign_in(self, email: str, password: str) -> httpx.Response:
        return await self.client.post(
            f"{next(self.bases)}/signin",
            data={"csrf_token": self.csrf, "email": email, "password": password},
            headers={"Cookie": f"{PRESESSION_COOKIE}={self.cookie}"},
        )


async def make_alice(db: Database) -> str:
    async with db.transaction() as session:
        return (await create_user(session, "alice@example.com", PASSWORD)).email


async def rows_for(db: Database, email: str) -> int | None:
    async with db.reading() as session:
        count = await session.scalar(
            sa.select(sa.func.count()).select_from(SigninFailure).where(SigninFailure.email == email)
        )
    return count if count and count >= EMAIL_LIMIT else None


def statuses(responses: list[httpx.Response]) -> list[int]:
    return sorted(r.status_code for r in responses)


async def burst_then_right_password(settings: Settings, db: Database, servers: int) -> None:
    alice = await make_alice(db)
    with ExitStack() as stack:
        bases = [stack.enter_context(live_server(settings, run_worker=False)) for _ in range(servers)]
        limits = httpx.Limits(max_connections=BURST + 1)
        async with httpx.AsyncClient(limits=limits, timeout=120, follow_redirects=False) as client:
            signer = Signer(client, bases)
            await signer.start()
            wrong = [asyncio.ensure_future(signer.sign_in(alice, f"guess {n}")) for n in range(BURST)]
            # The burst has taken the e-mail's places; the right password comes while it is being checked.
            await until(lambda: rows_for(db, alice), timeout=60)
            right = await signer.sign_in(alice, PASSWORD)
            answers = list(await asyncio.gather(*wrong))
    # Exactly the limit were checked (401); every other try was refused unchecked (429), the right one too.
    assert statuses(answers) == [401] * EMAIL_LIMIT + [429] * (BURST - EMAIL_LIMIT), statuses(answers)
    assert right.status_code == 429, right.text
    assert "Too many failed sign-ins for this e-mail" in right.text
    assert SESSION_COOKIE not in right.cookies
    async with db.reading() as session:
        assert await session.scalar(sa.select(sa.func.count()).select_from(WebSession)) == 0


async def test_a_burst_of_wrong_passwords_is_checked_at_most_the_limit_times(settings: Settings, db: Database) -> None:
    await burst_then_right_password(settings, db, servers=1)


async def test_two_web_processes_on_one_database_share_the_limit(settings: Settings, db: Database) -> None:
    await burst_then_right_password(settings, db, servers=2)


async def test_a_burst_from_one_address_is_checked_at_most_the_address_limit_times(
    settings: Settings, db: Database
) -> None:
    await make_alice(db)
    with ExitStack() as stack:
        bases = [stack.enter_context(live_server(settings, run_worker=False)) for _ in range(2)]
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=BURST), timeout=120) as client:
            signer = Signer(client, bases)
            await signer.start()
            answers = list(
                await asyncio.gather(*(signer.sign_in(f"user{n}@example.com", "guess") for n in range(BURST)))
            )
            # The address is now locked out, for an e-mail that has no failures of its own too.
            right = await signer.sign_in("alice@example.com", PASSWORD)
    assert statuses(answers) == [401] * ADDRESS_LIMIT + [429] * (BURST - ADDRESS_LIMIT), statuses(answers)
    assert right.status_code == 429 and "from your address" in right.text
