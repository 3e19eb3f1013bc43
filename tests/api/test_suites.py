"""Suites (issue 23, item 3): validation, ownership, scheduling within the key's limit, cancel, and the summary's
numbers against values computed here from the rows the test wrote.

No worker runs (`api_only`): started executions stay queued, and the test calls the workers' scheduler
(`schedule_suites`) itself where a worker would, so each step's outcome is exact.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from agents.suite_scheduler import schedule_suites
from core.bus import SUITE_CHANNEL
from core.models import Checkpoint, Decision, Event, Execution, SuiteRun, utcnow
from core.vocabulary import ACTIVE
from tests.api.helpers import CREATE, REVIEWER, account, assert_problem, task
from tests.conftest import Service, bearer

SUITES = "/api/eval/suites"
ALL = ("eval:create", "eval:read", "eval:manage")


def suite(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "Digest", "tasks": [task()], "models": ["offline"]}
    body.update(fields)
    return body


async def post(service: Service, key: str, body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    response = await service.client.post(SUITES, json=body, headers=bearer(key))
    return response, await response.get_json()


async def get(service: Service, key: str, suite_id: str) -> dict[str, Any]:
    response = await service.client.get(f"{SUITES}/{suite_id}", headers=bearer(key))
    payload: dict[str, Any] = await response.get_json()
    assert response.status_code == 200, payload
    return payload


async def runs_of(service: Service, key: str, suite_id: str, page_size: int | None = None) -> list[dict[str, Any]]:
    """Every run of the suite, page after page of GET /runs."""
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {**({"limit": str(page_size)} if page_size else {}), **({"cursor": cursor} if cursor else {})}
        response = await service.client.get(f"{SUITES}/{suite_id}/runs", query_string=query, headers=bearer(key))
        payload: dict[str, Any] = await response.get_json()
        assert response.status_code == 200, payload
        assert payload["suiteId"] == suite_id and (page_size is None or len(payload["runs"]) <= page_size)
        found.extend(payload["runs"])
        cursor = payload["nextCursor"]
        if cursor is None:
            return found


async def active_of(service: Service, key_id: str) -> int:
    async with service.db.reading() as session:
        count = await session.scalar(
            sa.select(sa.func.count()).where(Execution.api_key_id == key_id, Execution.status.in_(ACTIVE))
        )
    return int(count or 0)


async def test_a_task_body_is_validated_as_create_does_with_its_index(api_only: Service) -> None:
    me = await account(api_only, "owner@example.com", *ALL)
    needs_reviewer = task(checkpoints=[{"stage": "Send", "verificationQuestion": "Send it?"}])
    # Valid on its own (without verification), but `both` runs it with verification too: a reviewer is needed.
    response, payload = await post(
        api_only, me.key, suite(tasks=[task(), {**needs_reviewer, "testMode": "without-verification"}], testMode="both")
    )
    assert_problem(response, payload, 422, "validation_failed")
    assert payload["detail"].startswith("tasks[1].assignedReviewer: "), payload
    assert payload["errors"][0]["pointer"] == "/tasks/1/assignedReviewer"
    response, payload = await post(api_only, me.key, suite(tasks=[task(), task(taskName="")]))
    assert_problem(response, payload, 422, "validation_failed")
    assert payload["errors"][0]["pointer"] == "/tasks/1/taskName", payload
    response, payload = await post(api_only, me.key, suite(models=["offline", "external"]))
    assert_problem(response, payload, 422, "validation_failed")
    assert payload["errors"][0]["pointer"] == "/models/1", payload
    # 101 tasks x 2 models x 10 repeats = 2,020 runs
    response, payload = await post(api_only, me.key, suite(tasks=[task()] * 101, models=["offline", "x"], repeats=10))
    assert_problem(response, payload, 422, "validation_failed")  # "x" is no model
    response, payload = await post(
        api_only, me.key, suite(tasks=[task()] * 101, models=["offline", "openai:gpt-4o-mini"], repeats=10)
    )
    assert_problem(response, payload, 422, "suite_too_large")
    async with api_only.db.reading() as session:
        assert await session.scalar(sa.select(sa.func.count()).select_from(Execution)) == 0
        assert await session.scalar(sa.select(sa.func.count()).select_from(SuiteRun)) == 0


async def test_another_users_suite_is_not_found(api_only: Service) -> None:
    me = await account(api_only, "owner@example.com", *ALL)
    other = await account(api_only, "other@example.com", *ALL)
    response, created = await post(api_only, me.key, suite())
    assert response.status_code == 201, created
    for method, path in (
        ("get", f"{SUITES}/{created['suiteId']}"),
        ("get", f"{SUITES}/{created['suiteId']}/runs"),
        ("get", f"{SUITES}/{created['suiteId']}/export"),
        ("post", f"{SUITES}/{created['suiteId']}/cancel"),
    ):
        answer = await getattr(api_only.client, method)(path, headers=bearer(other.key))
        assert_problem(answer, await answer.get_json(), 404, "not_found")
    listed = await (await api_only.client.get(SUITES, headers=bearer(other.key))).get_json()
    assert listed["suites"] == []
    reader = await account(api_only, "reader@example.com", "eval:read")
    response, payload = await post(api_only, reader.key, suite())
    assert_problem(response, payload, 403, "insufficient_scope")


async def test_runs_wait_for_the_keys_free_slots_and_cancel_stops_them(api_only: Service) -> None:
    me = await account(api_only, "owner@example.com", *ALL)
    others = []
    for _ in range(7):  # the key's own executions, outside the suite, hold 7 of its 10 slots
        response = await api_only.client.post(CREATE, json=task(), headers=bearer(me.key))
        others.append((await response.get_json())["executionId"])
    response, created = await post(
        api_only,
        me.key,
        suite(tasks=[task(), task(taskName="Two")], repeats=3, models=["offline", "openai:gpt-4o-mini"]),
    )
    assert response.status_code == 201, created  # never a 429
    assert created["runs"] == 12 and created["status"] == "running"
    record = await get(api_only, me.key, created["suiteId"])
    assert record["progress"] == {"total": 12, "pending": 9, "active": 3, "finished": 0, "cancelled": 0}
    assert await active_of(api_only, me.key_id) == 10
    # Nothing frees a slot: the scheduler starts nothing.
    assert await schedule_suites(api_only.db, api_only.settings) == 0
    for execution_id in others[:4]:
        answer = await api_only.client.post(f"/api/eval/executions/{execution_id}/cancel", headers=bearer(me.key))
        assert answer.status_code == 200
    assert await schedule_suites(api_only.db, api_only.settings) == 4
    assert await active_of(api_only, me.key_id) == 10
    record = await get(api_only, me.key, created["suiteId"])
    assert record["progress"]["pending"] == 5 and record["progress"]["active"] == 7
    assert "runs" not in record  # the record stays small: the runs are a list of their own
    runs = await runs_of(api_only, me.key, created["suiteId"], page_size=5)  # three pages: 5, 5 and 2
    assert runs == await runs_of(api_only, me.key, created["suiteId"])
    started = [run for run in runs if run["executionId"]]
    # In plan order, each with its model and mode.
    assert [run["status"] for run in runs] == ["queued"] * 7 + ["pending"] * 5
    assert [(run["repeat"], run["taskIndex"], run["model"]) for run in runs[:4]] == [
        (1, 0, "offline"), (1, 0, "openai:gpt-4o-mini"), (1, 1, "offline"), (1, 1, "openai:gpt-4o-mini")
    ]  # fmt: skip
    # Paging refusals: a cursor not ours (or another suite's), a page too large, a parameter there is not.
    first = await (
        await api_only.client.get(
            f"{SUITES}/{created['suiteId']}/runs", query_string={"limit": "5"}, headers=bearer(me.key)
        )
    ).get_json()
    other = await post(api_only, me.key, suite())
    for query, status, code in (
        ({"cursor": first["nextCursor"][:-2] + "xx"}, 400, "invalid_cursor"),
        ({"limit": "501"}, 422, "validation_failed"),
        ({"limit": "0"}, 422, "validation_failed"),
        ({"page": "2"}, 422, "validation_failed"),
    ):
        answer = await api_only.client.get(
            f"{SUITES}/{created['suiteId']}/runs", query_string=query, headers=bearer(me.key)
        )
        assert_problem(answer, await answer.get_json(), status, code)
    answer = await api_only.client.get(
        f"{SUITES}/{other[1]['suiteId']}/runs", query_string={"cursor": first["nextCursor"]}, headers=bearer(me.key)
    )
    assert_problem(answer, await answer.get_json(), 400, "invalid_cursor")
    await api_only.client.post(f"{SUITES}/{other[1]['suiteId']}/cancel", headers=bearer(me.key))
    assert {run["model"] for run in started} == {"offline", "openai:gpt-4o-mini"}
    async with api_only.db.reading() as session:
        models = dict((await session.execute(sa.select(Execution.id, Execution.agent_model))).all())
    assert all(models[run["executionId"]] == run["model"] for run in started)

    answer = await api_only.client.post(f"{SUITES}/{created['suiteId']}/cancel", headers=bearer(me.key))
    cancelled = await answer.get_json()
    assert answer.status_code == 200, cancelled
    assert cancelled["status"] == "cancelled" and cancelled["finishedAt"] is not None
    assert cancelled["progress"] == {"total": 12, "pending": 0, "active": 0, "finished": 7, "cancelled": 5}
    assert [run["status"] for run in await runs_of(api_only, me.key, created["suiteId"])] == ["cancelled"] * 12
    # The key's other executions are not the suite's: they stay.
    assert await active_of(api_only, me.key_id) == 3
    assert await schedule_suites(api_only.db, api_only.settings) == 0
    answer = await api_only.client.post(f"{SUITES}/{created['suiteId']}/cancel", headers=bearer(me.key))
    assert_problem(answer, await answer.get_json(), 409, "suite_finished")
    listed = await (await api_only.client.get(SUITES, headers=bearer(me.key))).get_json()
    assert [(s["suiteId"], s["status"]) for s in listed["suites"]] == [
        (other[1]["suiteId"], "cancelled"), (created["suiteId"], "cancelled")
    ]  # fmt: skip


async def test_a_run_that_ends_wakes_the_suites_scheduler_without_a_webhook_or_scorer(api_only: Service) -> None:
    """Its end frees a slot of the key: the workers' scheduler hears of it at once (SUITE_CHANNEL), not at its next
    poll, whether or not the run has a webhook or a verdict to wait for."""
    me = await account(api_only, "owner@example.com", *ALL)
    response, created = await post(api_only, me.key, suite())
    assert response.status_code == 201, created
    (run,) = await runs_of(api_only, me.key, created["suiteId"])
    async with api_only.db.bus.subscribe(SUITE_CHANNEL) as heard:
        answer = await api_only.client.post(f"/api/eval/executions/{run['executionId']}/cancel", headers=bearer(me.key))
        assert answer.status_code == 200
        assert await heard.get(timeout=30) == {"suiteId": created["suiteId"]}


def wilson(passed: int, n: int) -> tuple[float, float]:
    z = 1.959963984540054
    p = passed / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (position - low) * (ordered[high] - ordered[low])


async def test_the_summary_numbers(api_only: Service) -> None:
    me = await account(api_only, "owner@example.com", *ALL)
    body = suite(
        tasks=[task(checkpoints=[{"stage": "Write", "verificationQuestion": "Write it?"}], assignedReviewer=REVIEWER)],
        models=["offline"],
        repeats=6,
        testMode="with-verification",
    )
    response, created = await post(api_only, me.key, body)
    assert response.status_code == 201, created
    # Finish the 6 runs by writing their rows as a worker and a reviewer would, with chosen numbers.
    base = utcnow() - timedelta(hours=1)
    waits_ms = [1500.25, 250.0, 9000.5, 42.0, 777.125]  # run 5 is never reviewed
    passed = [True, False, True, True, None, False]  # None: the verdict says neither
    rejects = [0, 1, 0, 1, 0, 0]
    edits = [0, 0, 1, 0, 0, 0]
    durations = [[120.5, 30.0], [400.0], [10.0, 10.0, 5.25], [1000.0], [70.0], [5.0]]
    tokens = [(100, 10), (200, 20), (300, 30), (400, 40), (500, 50), (600, 60)]
    async with api_only.db.transaction() as session:
        runs = list(await session.scalars(sa.select(SuiteRun).order_by(SuiteRun.position)))
        assert len(runs) == 6 and all(run.execution_id for run in runs)
        for index, run in enumerate(runs):
            execution_id = run.execution_id
            assert execution_id is not None
            checkpoint_id = await session.scalar(
                sa.select(Checkpoint.id).where(Checkpoint.execution_id == execution_id)
            )
            seq = 10
            events: list[tuple[str, dict[str, Any], Any]] = []
            for ms in durations[index]:
                events.append(
                    (
                        "model.request",
                        {
                            "durationMs": ms,
                            "inputTokens": tokens[index][0] // len(durations[index]),
                            "outputTokens": tokens[index][1] // len(durations[index]),
                            "costUsd": 0.001,
                        },
                        base,
                    )
                )
            if index < 5:
                paused = base + timedelta(minutes=index)
                decided = paused + timedelta(milliseconds=waits_ms[index])
                events.append(("checkpoint.awaiting_review", {"checkpointId": checkpoint_id, "attempt": 1}, paused))
                session.add(
                    Decision(
                        id=f"dec_{index}",
                        checkpoint_id=checkpoint_id,
                        attempt=1,
                        execution_id=execution_id,
                        decision="reject" if rejects[index] else "approve",
                        decided_by=REVIEWER,
                        via="api",
                        decided_at=decided,
                        edited_args={"to": "x"} if edits[index] else None,
                    )
                )
            for _ in range(rejects[index]):
                events.append(("checkpoint.revision_requested", {"checkpointId": checkpoint_id}, base))
            for type_, payload, at in events:
                seq += 1
                session.add(Event(execution_id=execution_id, seq=seq, type=type_, payload=payload, created_at=at))
            await session.execute(
                sa.update(Execution)
                .where(Execution.id == execution_id)
                .values(
                    status="completed" if index != 5 else "failed",
                    completed_at=base + timedelta(minutes=30),
                    verdict_state="done",
                    verdict_passed=passed[index],
                    verdict_score=None if passed[index] is None else float(passed[index]),
                    last_seq=seq,
                )
            )
    record = await get(api_only, me.key, created["suiteId"])
    assert record["status"] == "completed" and record["progress"]["finished"] == 6
    (group,) = record["byModel"]
    assert (group["model"], group["testMode"], group["runs"], group["finished"]) == (
        "offline",
        "with-verification",
        6,
        6,
    )
    assert (group["completed"], group["failed"]) == (5, 1)
    assert (group["passed"], group["scored"]) == (3, 5)
    assert group["passRate"] == 0.6
    low, high = wilson(3, 5)
    assert group["passRateInterval"] == [round(low, 6), round(high, 6)]
    assert group["interventionRate"] == round(3 / 6, 6)  # runs 1 and 3 rejected, run 2 edited
    assert group["revisionsPerRun"] == round(2 / 6, 6)
    whole_waits = [round(ms) for ms in waits_ms]  # each wait in whole ms, as metrics.reviewLatencyMs has it
    assert group["reviewWaitMs"] == {
        "p50": round(percentile(whole_waits, 0.5), 3),
        "p90": round(percentile(whole_waits, 0.9), 3),
    }
    agent = [round(sum(run)) for run in durations]
    assert group["agentTimeMs"] == {"p50": round(percentile(agent, 0.5), 3)}
    assert group["inputTokens"] == sum(t[0] // len(d) * len(d) for t, d in zip(tokens, durations, strict=True))
    assert group["outputTokens"] == sum(t[1] // len(d) * len(d) for t, d in zip(tokens, durations, strict=True))
    assert group["costUsd"] == round(0.001 * sum(len(d) for d in durations), 6)
    runs_out = await runs_of(api_only, me.key, record["suiteId"])
    assert [run["rejects"] for run in runs_out] == rejects
    assert [run["edits"] for run in runs_out] == edits
    assert [run["passed"] for run in runs_out] == passed
    # One run's numbers are its status record's metrics.
    status = await (
        await api_only.client.get(f"/api/eval/status/{runs_out[0]['executionId']}", headers=bearer(me.key))
    ).get_json()
    assert status["metrics"]["agentMs"] == agent[0]
    assert status["metrics"]["reviewLatencyMs"][0]["ms"] == whole_waits[0]
    assert status["metrics"]["checkpointsRejected"] == rejects[0]
