"""Waiting for an execution to reach a state, through the client under test's plain status reads."""

from __future__ import annotations

import asyncio

from vouch_client import AsyncClient, Client, StatusRecord

from tests.support.waiting import until


async def status_when(client: AsyncClient, execution_id: str, *statuses: str, timeout: float = 20) -> StatusRecord:
    async def check() -> StatusRecord | None:
        found = await client.status(execution_id)
        return found if found.status in statuses else None

    return await until(check, timeout=timeout)


def status_when_sync(client: Client, execution_id: str, *statuses: str, timeout: float = 20) -> StatusRecord:
    async def check() -> StatusRecord | None:
        found = client.status(execution_id)
        return found if found.status in statuses else None

    return asyncio.run(until(check, timeout=timeout))
