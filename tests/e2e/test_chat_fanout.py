"""Fan-out as the Procfile runs it: two `vouch web` processes and a `vouch worker`, meeting through Redis.

A watcher on each web process must see every event of an execution the worker runs, in order, with no gap:
the same sequence on both, and the same as the database's.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import Any

import httpx

from core.db import Database
from core.event_messages import event_message
from core.events import events_after
from core.links import chat_view_token
from core.settings import Settings
from tests.chat.helpers import REDIS_URL, Watcher
from tests.conftest import make_account
from tests.support.live import HTTP_TIMEOUT
from tests.support.ports import free_port
from tests.support.processes import VOUCH, running_worker, vouch_env, wait_until_healthy

TASK = (
    'Write a note called "plan.md" saying "Checklist ready". '
    'Then send an email to ops@example.com with subject "Release" and body "Version 2 is out". '
    "Then summarise the work."
)


@contextmanager
def web_process(settings: Settings, name: str, **extra: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`vouch web` on a free port, its log in the data dir; SIGTERM on exit."""
    port = free_port()
    log_path = settings.data_dir / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [VOUCH, "web", "--port", str(port)], env=vouch_env(settings, **extra), stdout=log, stderr=log
        )
        try:
            yield f"http://127.0.0.1:{port}", proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def test_watchers_on_two_web_processes_see_the_same_gapless_run(settings: Settings, db: Database) -> None:
    account = await make_account(db, settings, "owner@example.com")
    # A poll far longer than the test's patience: only Redis can carry the wake-ups and the events in time.
    extra = {"VOUCH_REDIS_URL": REDIS_URL, "VOUCH_WORKER_POLL_SECONDS": "60"}
    watchers = [Watcher(), Watcher()]
    with ExitStack() as stack:
        stack.enter_context(running_worker(settings, "worker", **extra))
        webs = [stack.enter_context(web_process(settings, f"web{n}", **extra)) for n in (1, 2)]
        for n, (base, proc) in enumerate(webs, 1):
            await wait_until_healthy(base, proc, settings.data_dir / f"web{n}.log")
        (web1, _), (web2, _) = webs
        try:
            async with httpx.AsyncClient(
                timeout=HTTP_TIMEOUT, headers={"Authorization": f"Bearer {account.key}"}
            ) as api:
                created = await api.post(
                    f"{web1}/api/eval/create-task-agent",
                    json={
                        "taskName": "Fan-out",
                        "taskDescription": TASK,
                        "testMode": "with-verification",
                        "assignedReviewer": account.email,
                        "checkpoints": [{"stage": "Send", "verificationQuestion": "Send the release mail?"}],
                    },
                )
                assert created.status_code == 201, created.text
                execution_id = created.json()["executionId"]
                token = chat_view_token(settings.secret_key, execution_id)
                auth = {"executionId": execution_id, "token": token}
                joined: list[dict[str, Any]] = []
                for watcher, base in zip(watchers, (web1, web2), strict=True):
                    await watcher.connect(base, auth=auth)
                    joined.append(await watcher.join(execution_id, token=token))
                    assert joined[-1]["ok"] is True

                cards = [
                    await w.until(partial(w.first, execution_id, "checkpoint.awaiting_review"), timeout=20)
                    for w in watchers
                ]
                card = cards[0]
                # Decided through the *other* web process: its event reaches web1's watcher through Redis.
                decided = await api.post(
                    f"{web2}/api/eval/executions/{execution_id}/checkpoints/{card['payload']['checkpointId']}/decision",
                    json={"decision": "approve"},
                )
                assert decided.status_code == 200, decided.text
                for watcher in watchers:
                    completed = await watcher.until(partial(watcher.first, execution_id, "execution.completed"), 20)
                    await watcher.until_seen(execution_id, completed["seq"])
        finally:
            for watcher in watchers:
                await watcher.close()

    async with db.reading() as session:
        stored = [event_message(row) for row in await events_after(session, execution_id)]
    assert [m["type"] for m in stored][-1] == "execution.completed"
    for watcher, answer in zip(watchers, joined, strict=True):
        merged = watcher.merged(execution_id)
        assert [merged[seq] for seq in sorted(merged)] == stored  # identical, gapless, as committed
        # Everything after the join came live, each once and in order: fan-out, not the replay, carried it.
        after_join = answer["events"][-1]["seq"] if answer["events"] else 0
        live = [m["seq"] for m in watcher.live if m["seq"] > after_join]
        assert live == list(range(after_join + 1, len(stored) + 1))
