"""core.wakeups and core.reconnect: a polling loop's wake-ups never fail it, and reconnecting is paced."""

from __future__ import annotations

import asyncio
import time

from core.bus import InProcessBus
from core.reconnect import Reconnecting
from core.redis_bus import RedisBus
from core.wakeups import Wakeups
from tests.support.ports import free_port


async def test_a_message_on_the_channel_wakes_and_one_on_a_longer_name_does_not() -> None:
    bus = InProcessBus()
    wakeups = Wakeups(bus, ("vouch-test:mail",), "a test loop")
    try:
        await bus.publish("vouch-test:mailbox", {})
        assert await wakeups.wait(0.05) is False
        await bus.publish("vouch-test:mail", {})
        assert await wakeups.wait(5) is True
        assert await wakeups.wait(0.05) is False  # one wake-up, once
    finally:
        await wakeups.stop()


async def test_with_redis_unreachable_a_wait_is_the_poll_and_never_an_error() -> None:
    bus = RedisBus(f"redis://127.0.0.1:{free_port()}/0")
    wakeups = Wakeups(bus, ("vouch-test:mail",), "a test loop")
    try:
        for _ in range(3):
            started = time.monotonic()
            assert await wakeups.wait(0.2) is False
            assert time.monotonic() - started < 2
        assert not wakeups.healthy
    finally:
        await wakeups.stop()
        await bus.close()


def test_the_wait_between_attempts_doubles_up_to_a_cap() -> None:
    reconnecting = Reconnecting("a test loop", "nothing")
    ceilings = []
    for _ in range(12):
        delay = reconnecting.failed(OSError("refused"))
        ceilings.append(delay)
        assert 0 < delay <= Reconnecting.CAP_SECONDS
    assert ceilings[0] <= Reconnecting.FIRST_SECONDS
    assert ceilings[-1] >= Reconnecting.CAP_SECONDS / 2  # capped, not still growing
    reconnecting.subscribed()
    assert reconnecting.failed(OSError("again")) <= Reconnecting.FIRST_SECONDS  # back: starts over


async def test_stop_ends_the_listener_however_quickly_redis_goes() -> None:
    bus = RedisBus(f"redis://127.0.0.1:{free_port()}/0")
    wakeups = Wakeups(bus, ("vouch-test:mail",), "a test loop")
    await asyncio.sleep(0)
    await asyncio.wait_for(wakeups.stop(), 5)
    await bus.close()
