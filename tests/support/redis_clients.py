"""A process's Redis connections, found by the name they carry (`?client_name=` in the Redis URL), killed on
purpose: how a test makes Redis blink for one process only, leaving other tests' connections alone."""

from __future__ import annotations

import uuid

import redis.asyncio as aioredis

REDIS_URL = "redis://127.0.0.1:6379/0"


def named_url(role: str, base: str = REDIS_URL) -> tuple[str, str]:
    """A Redis URL whose every connection is named after `role` and this test alone; (url, name)."""
    name = f"vouch-test-{role}-{uuid.uuid4().hex[:12]}"
    return f"{base}?client_name={name}", name


async def connections(admin: aioredis.Redis, name: str) -> list[dict[str, str]]:
    """CLIENT LIST's entries for the connections called `name`."""
    listed = await admin.execute_command("CLIENT", "LIST")
    text = listed.decode() if isinstance(listed, bytes) else str(listed)
    entries = [dict(field.split("=", 1) for field in line.split(" ") if "=" in field) for line in text.splitlines()]
    return [entry for entry in entries if entry.get("name") == name]


async def subscribed(admin: aioredis.Redis, name: str, *, except_ids: frozenset[str] = frozenset()) -> set[str]:
    """The ids of the connections called `name` that hold a subscription (channel or pattern)."""
    return {
        entry["id"]
        for entry in await connections(admin, name)
        if entry["id"] not in except_ids and (int(entry.get("sub", 0)) or int(entry.get("psub", 0)))
    }


async def kill(admin: aioredis.Redis, name: str) -> set[str]:
    """Kill every connection called `name` (as a Redis restart or a network blip would); their ids."""
    ids = {entry["id"] for entry in await connections(admin, name)}
    for client_id in ids:
        await admin.execute_command("CLIENT", "KILL", "ID", client_id)
    return ids
