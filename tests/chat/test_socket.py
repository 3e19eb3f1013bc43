"""The chat namespace over a real server: who may connect and join, replay by seq, live events."""

from __future__ import annotations

import asyncio

import pytest
import socketio
import sqlalchemy as sa

from chat.socket import REPLAY_PAGE
from core.db import Database
from core.events import append_any_event, events_after
from core.links import chat_view_token
from core.models import Decision, Execution
from core.settings import Settings
from tests.chat.helpers import (
    REVIEWER,
    Watcher,
    append,
    new_execution,
    pause_at_first_checkpoint,
    sign_in,
    sign_out_everywhere,
)


def token_of(settings: Settings, execution_id: str) -> str:
    return chat_view_token(settings.secret_key, execution_id)


async def watcher_on(web: str, watchers: list[Watcher], **connect: object) -> Watcher:
    watcher = Watcher()
    watchers.append(watcher)
    await watcher.connect(web, **connect)  # type: ignore[arg-type]
    return watcher


@pytest.mark.parametrize(
    "auth",
    [None, {}, {"executionId": "EXE", "token": "not-the-token"}, {"executionId": "OTHER", "token": "TOKEN"}],
    ids=["nothing", "empty", "wrong-token", "token-of-another-execution"],
)
async def test_connect_without_a_valid_token_or_session_is_refused(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher], auth: dict[str, str] | None
) -> None:
    execution_id = await new_execution(worker_db, chat_settings)
    other_id = await new_execution(worker_db, chat_settings)
    if auth:
        auth = {
            "executionId": {"EXE": execution_id, "OTHER": execution_id}[auth["executionId"]],
            "token": token_of(chat_settings, other_id) if auth["token"] == "TOKEN" else auth["token"],
        }
    watcher = Watcher()
    watchers.append(watcher)
    with pytest.raises(socketio.exceptions.ConnectionError):
        await watcher.connect(web, auth=auth, cookie="__Host-vouch_session=made-up")
    # A refused connect shows only in connect_error, with the server's reason.
    assert watcher.refusals == [{"message": "unauthorized"}]
    assert not watcher.client.connected


async def test_connect_from_another_origin_is_refused(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    execution_id = await new_execution(worker_db, chat_settings)
    auth = {"executionId": execution_id, "token": token_of(chat_settings, execution_id)}
    stranger = Watcher()
    watchers.append(stranger)
    with pytest.raises(socketio.exceptions.ConnectionError):
        await stranger.connect(web, auth=auth, origin="http://evil.example")
    own = await watcher_on(web, watchers, auth=auth, origin=web)
    assert (await own.join(execution_id, token=auth["token"]))["ok"] is True


async def test_a_view_token_opens_its_own_execution_only(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    mine = await new_execution(worker_db, chat_settings)
    theirs = await new_execution(worker_db, chat_settings)
    token = token_of(chat_settings, mine)
    watcher = await watcher_on(web, watchers, auth={"executionId": mine, "token": token})
    assert (await watcher.join(mine, token=token))["ok"] is True
    for attempt in (await watcher.join(theirs, token=token), await watcher.join(theirs)):
        assert attempt == {
            "ok": False,
            "error": "forbidden",
            "message": "This chat link is not valid, or you may not watch this execution.",
        }
    # Not in their room: their next event never comes, though ours (published after it) does.
    (their_seq,) = await append(worker_db, theirs)
    (our_seq,) = await append(worker_db, mine)
    await watcher.until_live(mine, our_seq)
    # Nothing of theirs; of ours, past the replay only the new event (what was committed before the join may also
    # come live, late through Redis: see test_the_reviewer_decides_from_the_card_and_every_watcher_sees_it).
    replayed = {m["seq"] for m in watcher.replayed}
    assert all(m["executionId"] == mine for m in watcher.live), watcher.live
    assert [m["seq"] for m in watcher.live if m["seq"] not in replayed] == [our_seq]
    assert their_seq == 2


async def test_every_join_rechecks_the_session(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    owner = "owner@example.com"
    execution_id = await new_execution(worker_db, chat_settings, owner=owner)
    other_id = await new_execution(worker_db, chat_settings)
    cookie, _ = await sign_in(worker_db, chat_settings.secret_key, owner)
    watcher = await watcher_on(web, watchers, cookie=cookie)
    joined = await watcher.join(execution_id)
    assert joined["ok"] is True and joined["canDecide"] is False  # the owner is not the reviewer
    assert (await watcher.join(other_id))["error"] == "forbidden"  # signed in, but not theirs

    await sign_out_everywhere(worker_db, owner)
    assert (await watcher.join(execution_id))["error"] == "forbidden"
    # The refused join also left the room: later events of the execution no longer come. An event of an
    # execution it may still watch (by token), published after, proves the first had its chance to arrive.
    other_token = token_of(chat_settings, other_id)
    assert (await watcher.join(other_id, token=other_token))["ok"] is True
    await append(worker_db, execution_id)
    (marker,) = await append(worker_db, other_id)
    await watcher.until_live(other_id, marker)
    assert {m["executionId"] for m in watcher.live} == {other_id}


async def test_join_replays_after_seq_then_streams_live(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    execution_id = await new_execution(worker_db, chat_settings)
    await append(worker_db, execution_id, 5)  # seqs 2..6 after execution.created
    token = token_of(chat_settings, execution_id)
    watcher = await watcher_on(web, watchers, auth={"executionId": execution_id, "token": token})
    answer = await watcher.join(execution_id, after_seq=3, token=token)
    assert answer["ok"] is True and answer["more"] is False
    assert [m["seq"] for m in answer["events"]] == [4, 5, 6]
    async with worker_db.reading() as session:
        stored = await events_after(session, execution_id, 3)
    assert [(m["type"], m["payload"]) for m in answer["events"]] == [(e.type, e.payload) for e in stored]
    assert answer["state"] == {
        "status": "queued",
        "text": "Queued: waiting for a worker",
        "final": False,
        "assignedReviewer": REVIEWER,
        "lastSeq": 6,
    }
    (seq,) = await append(worker_db, execution_id)
    await watcher.until_live(execution_id, seq)
    assert [m["seq"] for m in watcher.live] == [7]
    assert watcher.live[0]["payload"] == {"text": "message 0"}


async def test_a_long_history_replays_in_pages(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    execution_id = await new_execution(worker_db, chat_settings)
    async with worker_db.transaction() as session:  # one transaction: quick, and the seqs are the same
        for n in range(REPLAY_PAGE + 120):
            await append_any_event(session, execution_id, "agent.message", {"text": str(n)})
    token = token_of(chat_settings, execution_id)
    watcher = await watcher_on(web, watchers, auth={"executionId": execution_id, "token": token})
    after, pages = 0, []
    while True:
        answer = await watcher.join(execution_id, after_seq=after, token=token)
        pages.append(len(answer["events"]))
        after = answer["events"][-1]["seq"] if answer["events"] else after
        if not answer["more"]:
            break
    assert pages == [REPLAY_PAGE, 121]
    assert [m["seq"] for m in watcher.replayed] == list(range(1, REPLAY_PAGE + 122))


async def test_joining_while_events_are_written_misses_none_and_keeps_each_once(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    execution_id = await new_execution(worker_db, chat_settings)
    token = token_of(chat_settings, execution_id)
    watcher = await watcher_on(web, watchers, auth={"executionId": execution_id, "token": token})
    written = [1]  # new_execution's own event
    started, acknowledged = asyncio.Event(), asyncio.Event()

    async def write() -> None:
        # The writer and the join are coordinated, not timed: 40 events before the join is sent, events
        # for as long as it is in flight, and 40 after its answer, so the join lands inside the stream.
        while len(written) < 41 or not acknowledged.is_set():
            written.extend(await append(worker_db, execution_id))
            if len(written) == 41:
                started.set()
            await asyncio.sleep(0)  # let the join's messages through between commits
        written.extend(await append(worker_db, execution_id, 40))

    writer = asyncio.create_task(write())
    await started.wait()
    sent_after = written[-1]
    answer = await watcher.join(execution_id, token=token)
    acknowledged_after = written[-1]
    acknowledged.set()
    await writer
    total = written[-1]
    assert written == list(range(1, total + 1))
    await watcher.until_seen(execution_id, total)
    replayed = [m["seq"] for m in answer["events"]]
    # The join was answered mid-stream: after the first 40 writes, with writes committed while it was in
    # flight and 40 more still to come, so the replay held only what was there by then and the rest could
    # only arrive live.
    assert 41 <= sent_after < acknowledged_after < total, (sent_after, acknowledged_after, total)
    assert replayed == list(range(1, len(replayed) + 1))
    assert sent_after <= replayed[-1] <= acknowledged_after, (replayed[-1], sent_after, acknowledged_after)
    # Live events may repeat the tail of the replay (the client drops those), and must cover the rest.
    live = [m["seq"] for m in watcher.live]
    assert live == sorted(set(live))
    assert set(range(replayed[-1] + 1, total + 1)) <= set(live)
    assert sorted(watcher.merged(execution_id)) == list(range(1, total + 1))


async def test_bad_join_requests_get_an_answer_not_a_crash(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    execution_id = await new_execution(worker_db, chat_settings)
    token = token_of(chat_settings, execution_id)
    watcher = await watcher_on(web, watchers, auth={"executionId": execution_id, "token": token})
    assert (await watcher.join(execution_id, token=token))["ok"] is True
    assert (await watcher.join(execution_id, after_seq=-1, token=token))["error"] == "invalid"
    bad = await watcher.client.call("join_execution", "not an object", namespace="/chat", timeout=10)
    assert bad["error"] == "invalid"
    assert (await watcher.join("x" * 65, token=token))["error"] == "invalid"
    # A malformed request is answered, and costs the watcher nothing: it still watches.
    (seq,) = await append(worker_db, execution_id)
    await watcher.until_live(execution_id, seq)


async def test_the_reviewer_decides_from_the_card_and_every_watcher_sees_it(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    execution_id = await new_execution(worker_db, chat_settings)
    checkpoint_id = await pause_at_first_checkpoint(worker_db, execution_id)
    token = token_of(chat_settings, execution_id)
    onlooker = await watcher_on(web, watchers, auth={"executionId": execution_id, "token": token})
    cookie, csrf = await sign_in(worker_db, chat_settings.secret_key, REVIEWER)
    reviewer = await watcher_on(web, watchers, cookie=cookie)
    assert (await onlooker.join(execution_id, token=token))["canDecide"] is False
    assert (await reviewer.join(execution_id))["canDecide"] is True

    refused = await onlooker.decide(execution_id, checkpoint_id, "approve", token=token)
    assert refused["error"] == "not_assigned_reviewer"
    assert (await reviewer.decide(execution_id, checkpoint_id, "approve"))["error"] == "csrf"
    assert (await reviewer.decide(execution_id, checkpoint_id, "approve", csrf="forged"))["error"] == "csrf"
    assert (await reviewer.decide(execution_id, "chk_nope", "approve", csrf=csrf))["error"] == "not_found"
    assert (await reviewer.decide(execution_id, checkpoint_id, "maybe", csrf=csrf))["error"] == "invalid"

    done = await reviewer.decide(execution_id, checkpoint_id, "approve", csrf=csrf, comment="  Looks right  ")
    assert done["ok"] is True
    assert done["decision"]["by"] == REVIEWER and done["decision"]["via"] == "chat"
    assert done["decision"]["comment"] == "Looks right"
    for watcher in (onlooker, reviewer):
        await watcher.until_live(execution_id, 3)
        # The events committed before the join may still be on their way through Redis when the join is answered:
        # they then come live too, each the same as replayed (the protocol's "joins first and replays second";
        # a page drops seqs it has). Under a loaded machine they did. Past the replay, only the decision comes.
        replayed = {m["seq"]: m for m in watcher.replayed}
        assert replayed and all(m == replayed[m["seq"]] for m in watcher.live if m["seq"] in replayed), watcher.live
        (decided,) = [m for m in watcher.live if m["seq"] not in replayed]
        assert decided["type"] == "checkpoint.decided"
        assert decided["payload"] == {"checkpointId": checkpoint_id, **done["decision"]}

    again = await reviewer.decide(execution_id, checkpoint_id, "reject", csrf=csrf, comment="late")
    assert again["error"] == "already_decided"
    assert again["message"] == f"already approved by {REVIEWER} via chat at {done['decision']['at']}"
    async with worker_db.reading() as session:
        rows = (await session.scalars(sa.select(Decision).where(Decision.execution_id == execution_id))).all()
        status = await session.scalar(sa.select(Execution.status).where(Execution.id == execution_id))
    assert [(d.decision, d.via, d.decided_by) for d in rows] == [("approve", "chat", REVIEWER)]
    assert status == "running"


async def test_a_replaced_reviewer_can_no_longer_decide(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    execution_id = await new_execution(worker_db, chat_settings)
    checkpoint_id = await pause_at_first_checkpoint(worker_db, execution_id)
    cookie, csrf = await sign_in(worker_db, chat_settings.secret_key, REVIEWER)
    reviewer = await watcher_on(web, watchers, cookie=cookie)
    assert (await reviewer.join(execution_id))["canDecide"] is True
    async with worker_db.transaction() as session:
        await session.execute(
            sa.update(Execution).where(Execution.id == execution_id).values(assigned_reviewer="new@example.com")
        )
    answer = await reviewer.decide(execution_id, checkpoint_id, "approve", csrf=csrf)
    assert answer["error"] == "forbidden"  # no longer reviewer nor owner, and no token: may not even watch
    async with worker_db.reading() as session:
        assert await session.scalar(sa.select(Decision).where(Decision.execution_id == execution_id)) is None
