"""core.bus (in-process and Redis) and core.db's publish-after-commit."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
import redis as sync_redis
import redis.asyncio as aioredis
import sqlalchemy as sa

from core.bus import Bus, InProcessBus, Listening, SentInOrder, Subscription, make_bus
from core.db import Database, publish_after_commit
from core.ids import new_id
from core.models import User
from core.redis_bus import RedisBus
from tests.support.redis_clients import named_url, subscribed
from tests.support.waiting import until

REDIS_URL = "redis://127.0.0.1:6379/0"


def channel(name: str) -> str:
    return f"vouch-test:{name}:{uuid.uuid4().hex}"


@pytest.fixture(params=["inprocess", "redis"])
async def bus(request: pytest.FixtureRequest) -> AsyncIterator[Bus]:
    made: Bus = InProcessBus() if request.param == "inprocess" else RedisBus(REDIS_URL)
    yield made
    await made.close()


async def test_round_trip(bus: Bus) -> None:
    ch = channel("round")
    async with bus.subscribe(ch) as sub:
        await bus.publish(ch, {"n": 1, "text": "héllo", "nested": {"a": [1, 2]}})
        await bus.publish(ch, {"n": 2})
        assert await sub.get(timeout=5) == {"n": 1, "text": "héllo", "nested": {"a": [1, 2]}}
        assert await sub.get(timeout=5) == {"n": 2}


async def test_get_times_out_with_none(bus: Bus) -> None:
    async with bus.subscribe(channel("quiet")) as sub:
        assert await sub.get(timeout=0.05) is None
        assert await sub.get(timeout=0) is None


async def test_in_process_get_without_waiting_returns_what_is_queued() -> None:
    """`get(timeout=0)` is how tests say "nothing was published yet": it must see a message that was."""
    bus = InProcessBus()
    ch = channel("queued")
    async with bus.subscribe(ch) as sub:
        await bus.publish(ch, {"n": 1})
        assert await sub.get(timeout=0) == {"n": 1}
        assert await sub.get(timeout=0) is None


async def test_messages_reach_only_that_channels_subscribers(bus: Bus) -> None:
    a, b = channel("a"), channel("b")
    async with bus.subscribe(a) as sub_a, bus.subscribe(b) as sub_b, bus.subscribe(a, b) as sub_ab:
        await bus.publish(b, {"to": "b"})
        await bus.publish(a, {"to": "a"})
        assert await sub_a.get(timeout=5) == {"to": "a"}
        assert await sub_b.get(timeout=5) == {"to": "b"}
        assert {str((await sub_ab.get(timeout=5) or {}).get("to")) for _ in range(2)} == {"a", "b"}
        # Nothing else is waiting for anyone.
        for sub in (sub_a, sub_b, sub_ab):
            assert await sub.get(timeout=0.05) is None


async def test_every_subscriber_gets_its_copy(bus: Bus) -> None:
    ch = channel("fanout")
    async with bus.subscribe(ch) as one, bus.subscribe(ch) as two:
        await bus.publish(ch, {"x": 1})
        assert await one.get(timeout=5) == {"x": 1}
        assert await two.get(timeout=5) == {"x": 1}


async def test_subscribing_again_after_leaving(bus: Bus) -> None:
    ch = channel("leave")
    async with bus.subscribe(ch):
        pass
    async with bus.subscribe(ch) as second:
        await bus.publish(ch, {"after": True})
        assert await second.get(timeout=5) == {"after": True}


async def test_redis_bus_crosses_connections() -> None:
    """Two RedisBus objects stand for two processes."""
    sender, receiver = RedisBus(REDIS_URL), RedisBus(REDIS_URL)
    ch = channel("cross")
    try:
        async with receiver.subscribe(ch) as sub:
            await sender.publish(ch, {"from": "another process"})
            assert await sub.get(timeout=5) == {"from": "another process"}
    finally:
        await sender.close()
        await receiver.close()


async def _listened(bus: RedisBus, ch: str) -> tuple[Listening, list[dict[str, Any]], list[None]]:
    heard: list[dict[str, Any]] = []
    resets: list[None] = []
    listening = bus.listen((ch,), lambda _channel, message: heard.append(message), lambda: resets.append(None))
    await until(lambda: _true(listening.healthy))
    return listening, heard, resets


async def _true(value: bool) -> bool | None:
    return True if value else None


async def test_another_process_hears_every_message_in_the_order_published() -> None:
    sender, receiver = RedisBus(REDIS_URL), RedisBus(REDIS_URL)
    ch = channel("order")
    try:
        _, heard, _ = await _listened(receiver, ch)
        # The first ones queue while the sender connects; the rest leave as they are published.
        for n in range(300):
            await sender.publish(ch, {"n": n})
            if n % 50 == 0:
                await asyncio.sleep(0)
        await until(lambda: _true(len(heard) >= 300))
        assert heard == [{"n": n} for n in range(300)]
    finally:
        await sender.close()
        await receiver.close()


async def test_a_listener_whose_connection_is_killed_says_so_and_hears_again() -> None:
    # The receiver's connections carry a name of this test's own: only its subscription is killed, never that of
    # another test using this Redis at the same time (`CLIENT KILL TYPE pubsub` killed theirs too).
    named, name = named_url("killed-listener")
    sender, receiver = RedisBus(REDIS_URL), RedisBus(named)
    ch = channel("killed")
    admin = aioredis.Redis.from_url(REDIS_URL)
    try:
        listening, heard, resets = await _listened(receiver, ch)
        assert len(resets) == 1  # subscribed: what came before it was missed
        listeners = await subscribed(admin, name)
        assert listeners
        for client_id in listeners:
            await admin.execute_command("CLIENT", "KILL", "ID", client_id)
        await until(lambda: _true(len(resets) >= 3 and listening.healthy))  # lost, then subscribed again
        await sender.publish(ch, {"after": "the kill"})
        await until(lambda: _true(heard == [{"after": "the kill"}]))
    finally:
        await admin.aclose()
        await sender.close()
        await receiver.close()


async def test_a_followed_channel_is_heard_from_another_process_only_while_followed() -> None:
    sender, receiver = RedisBus(REDIS_URL), RedisBus(REDIS_URL)
    admin = aioredis.Redis.from_url(REDIS_URL)
    prefix, other = channel("followed") + ":", channel("plain")
    followed, unfollowed = f"{prefix}one", f"{prefix}two"
    heard: list[tuple[str, dict[str, Any]]] = []
    try:
        listening = receiver.listen(
            (other,), lambda ch, message: heard.append((ch, message)), lambda: None, followed=(prefix,)
        )
        await until(lambda: _true(listening.healthy))
        assert await _numsub(admin, followed) == 0  # nothing under the followed prefix is asked for by itself
        await until(lambda: _true(listening.follow(followed)))
        # One sender's messages arrive in order: had the unfollowed channel been heard, it would come first.
        await sender.publish(unfollowed, {"n": 1})
        await sender.publish(followed, {"n": 2})
        await until(lambda: _true(len(heard) == 1))
        assert heard == [(followed, {"n": 2})]

        listening.unfollow(followed)
        assert not listening.follow(unfollowed)  # its SUBSCRIBE is not answered yet
        await until(lambda: _numsub(admin, followed, expect=0))
        await sender.publish(followed, {"n": 3})
        await sender.publish(other, {"n": 4})
        await until(lambda: _true(len(heard) == 2))
        assert heard[1] == (other, {"n": 4})

        # Heard again once followed again; a channel asked for twice while its first answer is on its way counts
        # as heard only with its last.
        listening.unfollow(unfollowed)
        await until(lambda: _true(listening.follow(followed) and listening.follow(unfollowed)))
        await sender.publish(unfollowed, {"n": 5})
        await until(lambda: _true(len(heard) == 3))
        assert heard[2] == (unfollowed, {"n": 5})
    finally:
        await admin.aclose()
        await sender.close()
        await receiver.close()


async def test_a_listener_subscribes_its_followed_channels_again_after_a_lost_connection() -> None:
    named, name = named_url("followed-killed")
    sender, receiver = RedisBus(REDIS_URL), RedisBus(named)
    admin = aioredis.Redis.from_url(REDIS_URL)
    prefix = channel("refollowed") + ":"
    followed = f"{prefix}one"
    heard: list[dict[str, Any]] = []
    resets: list[None] = []
    try:
        listening = receiver.listen(
            (channel("plain"),),
            lambda _ch, message: heard.append(message),
            lambda: resets.append(None),
            followed=(prefix,),
        )
        await until(lambda: _true(listening.follow(followed)))
        for client_id in await subscribed(admin, name):
            await admin.execute_command("CLIENT", "KILL", "ID", client_id)
        await until(lambda: _true(len(resets) >= 3))  # lost, then subscribed again
        await until(lambda: _true(listening.follow(followed)))
        await sender.publish(followed, {"after": "the kill"})
        await until(lambda: _true(heard == [{"after": "the kill"}]))
    finally:
        await admin.aclose()
        await sender.close()
        await receiver.close()


async def test_in_process_every_channel_is_heard_and_followed_at_once() -> None:
    bus = InProcessBus()
    heard: list[str] = []
    listening = bus.listen(("a:",), lambda ch, _message: heard.append(ch), lambda: None, followed=("b:",))
    assert listening.follow("b:1")
    await bus.publish("b:2", {})
    await bus.publish("c:1", {})
    assert heard == ["b:2"]
    await listening.stop()
    assert not listening.follow("b:1")


async def _numsub(admin: aioredis.Redis, ch: str, expect: int | None = None) -> Any:
    """How many connections subscribe to `ch`; with `expect`, True once that many do (else None)."""
    [(_, count)] = await admin.pubsub_numsub(ch)
    if expect is None:
        return count
    return True if count == expect else None


def test_make_bus_chooses_by_setting() -> None:
    assert isinstance(make_bus(None), InProcessBus)


async def test_make_bus_redis() -> None:
    bus = make_bus(REDIS_URL)
    try:
        assert isinstance(bus, RedisBus)
    finally:
        await bus.close()


# --- publish after commit --------------------------------------------------------------------------


class SpyBus:
    """Records publishes; `on_publish` runs first and may raise."""

    def __init__(self) -> None:
        self.inner = InProcessBus()
        self.published: list[tuple[str, dict[str, Any]]] = []
        self.on_publish: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None

    async def publish(self, channel: str, message: dict[str, Any]) -> None:
        if self.on_publish is not None:
            await self.on_publish(channel, message)
        self.published.append((channel, message))
        await self.inner.publish(channel, message)

    async def flush(self) -> None:
        await self.inner.flush()

    def subscribe(self, *channels: str) -> AbstractAsyncContextManager[Subscription]:
        return self.inner.subscribe(*channels)

    async def close(self) -> None:
        await self.inner.close()


@pytest.fixture
async def spied(database_url: str) -> AsyncIterator[tuple[Database, SpyBus]]:
    spy = SpyBus()
    database = Database(database_url, spy)
    yield database, spy
    await database.dispose()


def a_user() -> User:
    uid = new_id("usr")
    return User(id=uid, email=f"{uid}@example.com")


async def user_exists(db: Database, user_id: str) -> bool:
    async with db.reading() as session:
        return await session.get(User, user_id) is not None


async def test_published_only_after_commit(spied: tuple[Database, SpyBus]) -> None:
    db, spy = spied
    user = a_user()
    seen_committed: list[bool] = []

    async def check_row_is_committed(_channel: str, _message: dict[str, Any]) -> None:
        seen_committed.append(await user_exists(db, user.id))

    spy.on_publish = check_row_is_committed
    async with db.transaction() as session:
        session.add(user)
        publish_after_commit(session, "ch:one", {"userId": user.id})
        publish_after_commit(session, "ch:two", {"n": 2})
        await session.flush()
        assert spy.published == []
    assert spy.published == [("ch:one", {"userId": user.id}), ("ch:two", {"n": 2})]
    assert seen_committed == [True, True], "a subscriber hearing the news must find the row"


async def test_not_published_when_the_transaction_fails(spied: tuple[Database, SpyBus]) -> None:
    db, spy = spied
    user = a_user()
    with pytest.raises(RuntimeError, match="boom"):
        async with db.transaction() as session:
            session.add(user)
            publish_after_commit(session, "ch:never", {"userId": user.id})
            await session.flush()
            raise RuntimeError("boom")
    assert spy.published == []
    assert not await user_exists(db, user.id)
    # The queue does not leak into the next transaction either.
    async with db.transaction() as session:
        publish_after_commit(session, "ch:next", {"n": 1})
    assert spy.published == [("ch:next", {"n": 1})]


async def test_not_published_when_commit_fails(spied: tuple[Database, SpyBus]) -> None:
    db, spy = spied
    user = a_user()
    async with db.transaction() as session:
        session.add(user)
    duplicate = User(id=new_id("usr"), email=user.email)
    with pytest.raises(sa.exc.IntegrityError):
        async with db.transaction() as session:
            session.add(duplicate)
            publish_after_commit(session, "ch:dup", {"userId": duplicate.id})
    assert spy.published == []


async def test_a_failing_bus_does_not_undo_or_fail_a_commit(spied: tuple[Database, SpyBus]) -> None:
    """The bus carries news only: once the rows are committed the caller must see success."""
    db, spy = spied
    user = a_user()

    async def redis_blinks(channel: str, _message: dict[str, Any]) -> None:
        if channel == "ch:first":
            raise ConnectionError("bus is down")

    spy.on_publish = redis_blinks
    async with db.transaction() as session:
        session.add(user)
        publish_after_commit(session, "ch:first", {"n": 1})
        publish_after_commit(session, "ch:second", {"n": 2})
    assert await user_exists(db, user.id)
    assert spy.published == [("ch:second", {"n": 2})]


async def test_a_commits_messages_leave_before_the_rest_of_its_turn(database_url: str) -> None:
    """Publishes asked in one turn of the loop leave together at its end; a commit sends its own at once, so
    what its caller does next in that turn (answering a request, logging it) does not hold them back."""
    bus = RedisBus(REDIS_URL)
    db = Database(database_url, bus)
    ch = channel("flushed")
    watcher = sync_redis.Redis.from_url(REDIS_URL).pubsub(ignore_subscribe_messages=True)
    try:
        watcher.subscribe(ch)
        await bus.publish(ch, {"n": 0})  # the publisher connects on its first message

        async def first_heard() -> dict[str, Any] | None:
            raw = watcher.get_message(timeout=0)
            return None if raw is None else dict(json.loads(raw["data"]))

        assert await until(first_heard) == {"n": 0}
        async with db.session(write=True) as session:
            publish_after_commit(session, ch, {"n": 1})
            await db.commit(session)
            # A blocking read: the event loop does not turn until it returns, so only a message already
            # written can be heard.
            raw = watcher.get_message(timeout=5)
        assert raw is not None and json.loads(raw["data"]) == {"n": 1}
    finally:
        watcher.close()
        await bus.close()
        await db.dispose()


async def _let_tasks_run() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_batches_spaced_apart_gather_what_is_put_meanwhile_and_a_flush_sends_them_at_once() -> None:
    sent: list[list[int]] = []

    async def send(batch: list[int]) -> None:
        sent.append(batch)

    queue: SentInOrder[int] = SentInOrder(send, "spaced", spacing=60.0)
    queue.put(1)
    await _let_tasks_run()
    assert sent == [[1]] and queue.idle  # the first batch leaves at once
    queue.put(2)
    queue.put_all([3, 4])
    await _let_tasks_run()
    assert sent == [[1]] and not queue.idle  # the next waits out the spacing
    await queue.flush(timeout=5.0)
    assert sent == [[1], [2, 3, 4]] and queue.idle  # gathered, in order, and not a minute later
    queue.put(5)
    await _let_tasks_run()
    assert sent == [[1], [2, 3, 4]]  # a flush hurries what waits then, not what is put later
    await queue.flush(timeout=5.0)
    assert sent == [[1], [2, 3, 4], [5]]
