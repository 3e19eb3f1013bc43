"""Coroutines stepped by hand: run in the calling task while they need not wait, and only then handed to a task.

A task costs its creation and at least one turn of the event loop before it runs, behind whatever else the
process has ready; for a coroutine that usually finishes without waiting (a session's close after its commit, a
websocket write the transport takes at once) that turn is most of its cost.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


@types.coroutine
def carry_on(coro: Coroutine[Any, Any, T], waiting_on: Any) -> Generator[Any, Any, T]:
    """Finish, inside a task, a coroutine that was stepped by hand and stopped at `waiting_on`.

    It yields what the coroutine yielded, so the task waits on that, then passes on what the task sends or
    throws (cancellation) exactly as `await` would have."""
    while True:
        try:
            value = yield waiting_on
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                waiting_on = coro.throw(exc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            continue
        try:
            waiting_on = coro.send(value)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


async def run_to_completion(coro: Coroutine[Any, Any, T]) -> T:
    """`coro`'s result, the coroutine run to its end even if the caller is cancelled meanwhile (the cancellation
    is raised once it has ended), as SQLAlchemy's asyncio extension runs a session's or connection's close when an
    `async with` block ends; but in the calling task for as long as it does not wait, and in a task of its own,
    shielded, only from the moment it does."""
    try:
        waiting_on = coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    task: asyncio.Future[T] = asyncio.ensure_future(carry_on(coro, waiting_on))
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError as err:
            if task.done():
                raise
            cancelled = err
        else:
            break
    if cancelled is not None:
        raise cancelled
    return result
