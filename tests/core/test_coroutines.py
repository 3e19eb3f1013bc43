"""core/coroutines.py: a coroutine run to completion in the calling task while it need not wait, finished in a
task of its own, whatever happens to the caller, once it does."""

from __future__ import annotations

import asyncio

import pytest

from core.coroutines import carry_on, run_to_completion


async def test_a_coroutine_that_never_waits_runs_in_the_callers_task() -> None:
    ran_in: list[asyncio.Task[object] | None] = []

    async def close() -> str:
        ran_in.append(asyncio.current_task())
        return "closed"

    assert await run_to_completion(close()) == "closed"
    assert ran_in == [asyncio.current_task()]


async def test_a_coroutine_that_waits_goes_on_in_a_task_of_its_own_and_gives_its_result() -> None:
    ran_in: list[asyncio.Task[object] | None] = []
    go_on = asyncio.Event()

    async def close() -> int:
        ran_in.append(asyncio.current_task())
        await go_on.wait()
        ran_in.append(asyncio.current_task())
        return 7

    caller = asyncio.create_task(run_to_completion(close()))
    await asyncio.sleep(0)  # the caller steps the coroutine up to its wait
    assert ran_in == [caller]
    go_on.set()
    assert await caller == 7
    assert ran_in[1] is not None and ran_in[1] is not caller


async def test_a_cancelled_caller_waits_for_the_end_then_is_cancelled() -> None:
    ended = asyncio.Event()
    go_on = asyncio.Event()
    waiting = asyncio.Event()

    async def close() -> None:
        waiting.set()
        await go_on.wait()
        ended.set()

    caller = asyncio.create_task(run_to_completion(close()))
    await waiting.wait()
    caller.cancel()
    await asyncio.sleep(0)  # the cancellation reaches the caller, which keeps waiting
    assert not caller.done()
    go_on.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert ended.is_set()


async def test_an_error_reaches_the_caller_whether_or_not_the_coroutine_waited() -> None:
    async def fails_at_once() -> None:
        raise ValueError("at once")

    async def fails_later() -> None:
        await asyncio.sleep(0)
        raise ValueError("later")

    with pytest.raises(ValueError, match="at once"):
        await run_to_completion(fails_at_once())
    with pytest.raises(ValueError, match="later"):
        await run_to_completion(fails_later())


async def test_carry_on_passes_a_cancellation_into_the_coroutine() -> None:
    seen: list[str] = []
    never = asyncio.Event()

    async def waits() -> None:
        try:
            await never.wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    coro = waits()
    waiting_on = coro.send(None)
    task = asyncio.ensure_future(carry_on(coro, waiting_on))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]
