"""Following a run: stream() over the chat's Socket.IO namespace with the API key, and wait()."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
from vouch_client import AsyncClient, Client, Event, StreamError

from core.settings import Settings
from tests.client.conftest import OWNER, Vouch, make_accounts, plain_task, reviewed_task
from tests.client.helpers import status_when
from tests.client.proxy import Proxy
from tests.support.live import live_server
from tests.support.waiting import until


async def _true(condition: bool) -> bool | None:
    return True if condition else None


def _seqs(events: list[Event]) -> list[int]:
    return [event.seq for event in events]


async def test_stream_yields_every_event_once_in_order_until_the_end(vouch: Vouch) -> None:
    async with AsyncClient(vouch.base, vouch.owner.key) as client:
        created = await client.create_task(reviewed_task())
        seen: list[Event] = []
        async for event in client.stream(created.executionId):
            seen.append(event)
            if event.type == "checkpoint.awaiting_review":
                await client.decide(created.executionId, event.payload["checkpointId"], "approve", "go")
        assert _seqs(seen) == list(range(1, len(seen) + 1))
        types = [event.type for event in seen]
        assert types[0] == "execution.created" and types[-1] == "execution.completed"
        assert "checkpoint.decided" in types and seen[-1].outcome == "completed"
        assert all(event.executionId == created.executionId for event in seen)

        # Resume by seq: from any point on, exactly the rest, also once the run has ended.
        middle = seen[len(seen) // 2].seq
        rest = [event async for event in client.stream(created.executionId, after_seq=middle)]
        assert _seqs(rest) == list(range(middle + 1, seen[-1].seq + 1))
        assert [event async for event in client.stream(created.executionId, after_seq=seen[-1].seq)] == []


def test_sync_stream_and_wait_follow_the_live_stream(vouch: Vouch) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        created = client.create_task(plain_task())
        events = list(client.stream(created.executionId))
        assert events[-1].type == "execution.completed"
        assert client.wait(created.executionId, timeout=10).status == "completed"


async def test_wait_falls_back_to_polling_when_websockets_are_blocked(vouch: Vouch) -> None:
    with Proxy(vouch.base, block_websockets=True).running() as proxy:
        async with AsyncClient(proxy.base, vouch.owner.key) as client:
            created = await client.create_task(reviewed_task())
            paused = await status_when(client, created.executionId, "awaiting_review")
            waiting = paused.waiting_checkpoint()
            assert waiting is not None

            async def approve_later() -> None:
                # Once wait() has tried the stream (and been refused), the run moves on.
                await until(lambda: _true(proxy.blocked > 0), timeout=15)
                await client.decide(created.executionId, waiting.checkpointId, "approve")

            approving = asyncio.ensure_future(approve_later())
            final = await client.wait(created.executionId, timeout=30, poll_interval=0.1)
            await approving
            assert final.status == "completed" and proxy.blocked >= 1

            # A stream that never connected says so at once (wait() relies on it to poll instead); ending
            # quietly, as if the run had no events, would hide the blocked websocket.
            blocked_before = proxy.blocked
            refused = r"^live stream lost for 0\.5 s: could not connect to the live stream"
            with pytest.raises(StreamError, match=refused):
                async for _ in client.stream(created.executionId, reconnect_for=0.5):
                    raise AssertionError("no event can come through a blocked websocket")
            assert proxy.blocked > blocked_before


async def test_stream_resumes_after_the_web_process_restarts(client_settings: Settings) -> None:
    owner = (await make_accounts(client_settings, (OWNER, ("eval:manage",))))[0]
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    first_server = live_server(client_settings, run_worker=True, port=port)
    base = first_server.__enter__()
    restarted = threading.Event()
    async with AsyncClient(base, owner.key) as client:
        created = await client.create_task(reviewed_task())
        seen: list[Event] = []
        async for event in client.stream(created.executionId, reconnect_for=30):
            seen.append(event)
            if event.type == "checkpoint.awaiting_review" and not restarted.is_set():
                # The web process (with its worker) goes away and a new one takes the port.
                await asyncio.to_thread(first_server.__exit__, None, None, None)
                second_server = live_server(client_settings, run_worker=True, port=port)
                await asyncio.to_thread(second_server.__enter__)
                restarted.set()
                await client.decide(created.executionId, event.payload["checkpointId"], "approve", "after restart")
        await asyncio.to_thread(second_server.__exit__, None, None, None)
    assert _seqs(seen) == list(range(1, len(seen) + 1)), "no gap and no duplicate across the restart"
    assert seen[-1].type == "execution.completed"
    assert any(e.type == "checkpoint.decided" and e.payload.get("comment") == "after restart" for e in seen)
