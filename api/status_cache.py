"""The per-process status-record cache: `GET /api/eval/status/<id>` without a database read when nothing changed.

An entry per execution holds the record's JSON body, already encoded, split around the parts that are not facts
of the rows and so are filled in at serve time:

- `chatUrl`, which names the host the request used when no base URL is configured;
- the metrics' open intervals (`durationMs`, `reviewWaitMs`, each `reviewLatencyMs[].ms`), which
  run to *now* while the execution has not finished: they are computed per request from what the entry counted
  once (`core.metrics.MetricsSoFar`), so a cached record reads exactly as a fresh one would at that moment. A
  finished execution's metrics are fixed, and encoded in the body like the rest.

Ownership is not part of the entry: the owner's id is, and every request compares it with the caller's (another
account's execution answers 404, cached or not).

What invalidates an entry (each published after its commit, heard through `core.bus.Bus.listen`):

- every commit that adds events to the execution (`core.events.append_events` says so on the execution's channel,
  with the last seq it added): the worker's claims, steps, pauses and endings, decisions, updates and cancels all
  append one in the transaction that changes the rows the record shows. A process hears the channels of the
  executions whose records it filled lately (`MAX_FOLLOWED`), not every commit's: a fill stores only once its
  execution's channel is confirmed heard (`core.bus.Listening.follow`), so the first read of an execution here
  asks for its news and the next is cached. Unfollowing one (the oldest, past the bound) drops its entry;
- what changes the record without an event announces it on `CACHE_CHANNEL` (`invalidate_status_after_commit`):
  a webhook attempt the worker recorded, a redelivery queued, an execution deleted.

The committing process hears its own change before `publish` returns, so its next request reads the change;
other web processes one bus hop later. Bounded in age (VOUCH_STATUS_CACHE_SECONDS) for what a process could not
hear, and bypassed while its bus listener is down (core/cache.py).
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from quart import Response, current_app

from api.app_services import app_services
from api.auth import Caller
from api.problems import not_found
from api.status import record_and_facts
from core.auth_cache import ApiKeyCache
from core.bus import CACHE_CHANNEL, EXECUTION_CHANNEL_PREFIX, Bus, Listening, execution_channel
from core.cache import InvalidatingCache
from core.metrics import MetricsSoFar, RunFacts
from core.models import Execution, utcnow
from core.vocabulary import FINAL
from core.web.services import db_session
from core.webhooks import invalidate_status_after_commit

__all__ = ["StatusCache", "invalidate_status_after_commit", "listen_for_invalidations", "serve_status"]

MAX_RECORDS = 10_000
# Executions whose news a process hears from the others; an entry is filled only for one of those.
MAX_FOLLOWED = MAX_RECORDS
# A placeholder for each field filled in per request, unique to this process so that no stored text can look like one.
_MARK = secrets.token_hex(16)


def _dumps(obj: Any) -> str:
    # Flask's provider as `response()` calls it for a compact body (its sort_keys and ensure_ascii apply).
    return current_app.json.dumps(obj, separators=(",", ":"))


def _pretty(obj: Any) -> str:
    # Flask's provider as `response()` calls it in debug mode (indented).
    return current_app.json.dumps(obj, indent=2) + "\n"


def _compact() -> bool:
    compact = getattr(current_app.json, "compact", None)
    return not ((compact is None and current_app.debug) or compact is False)


@dataclass(frozen=True)
class CachedStatus:
    user_id: str
    record: dict[str, Any]
    # None once the metrics no longer depend on the clock; they are then in `metrics_json`.
    so_far: MetricsSoFar | None
    metrics_json: str | None
    # The compact body cut at the live fields' placeholders, and which field fills each cut; None when the app
    # pretty-prints JSON (debug), where a spliced part would not be indented like the rest.
    pieces: tuple[str, ...] | None
    slots: tuple[str, ...]

    @classmethod
    def of(cls, user_id: str, record: dict[str, Any], facts: RunFacts) -> CachedStatus:
        execution = facts.execution
        fixed = execution.status in FINAL and execution.completed_at is not None
        so_far = MetricsSoFar.of(facts)
        metrics = so_far.at(facts.end)
        metrics_json = _dumps(metrics) if fixed else None
        pieces: tuple[str, ...] | None = None
        slots: list[str] = []
        if _compact():
            marks = {"chatUrl": f"{_MARK}:chatUrl"}
            if not fixed:
                # The clock's numbers are cut out one by one, each wait's `ms` too: a request writes integers
                # into the body and encodes nothing else but the chat URL.
                waits = (f"wait{i}" for i in range(len(metrics["reviewLatencyMs"])))
                marks.update({field: f"{_MARK}:{field}" for field in ("durationMs", "reviewWaitMs", *waits)})
                metrics["durationMs"], metrics["reviewWaitMs"] = marks["durationMs"], marks["reviewWaitMs"]
                metrics["reviewLatencyMs"] = [
                    dict(entry, ms=marks[f"wait{i}"]) for i, entry in enumerate(metrics["reviewLatencyMs"])
                ]
            body = _dumps({**record, "chatUrl": marks["chatUrl"], "metrics": metrics}) + "\n"
            found = sorted((body.index(_dumps(mark)), field) for field, mark in marks.items())
            cut, start = [], 0
            for at, field in found:
                cut.append(body[start:at])
                start = at + len(_dumps(marks[field]))
                slots.append(field)
            cut.append(body[start:])
            pieces = tuple(cut)
        return cls(user_id, record, None if fixed else so_far, metrics_json, pieces, tuple(slots))

    def response(self, chat_url: str, now: datetime | None = None) -> Response:
        """The record as it reads at `now` (the request's moment unless given)."""
        if self.pieces is None:
            record = dict(self.record, chatUrl=chat_url)
            record["metrics"] = (
                self.so_far.at(now or utcnow())
                if self.so_far is not None
                else current_app.json.loads(self.metrics_json or "")
            )
            return current_app.response_class(_pretty(record), mimetype="application/json")
        live = {"chatUrl": _dumps(chat_url)}
        if self.so_far is not None:
            clock = self.so_far.clock_fields(now or utcnow())
            # Integers (core.metrics.ms_between), which JSON writes as Python does.
            live["durationMs"], live["reviewWaitMs"] = str(clock["durationMs"]), str(clock["reviewWaitMs"])
            for i, entry in enumerate(clock["reviewLatencyMs"]):
                live[f"wait{i}"] = str(entry["ms"])
        parts = [self.pieces[0]]
        for slot, piece in zip(self.slots, self.pieces[1:], strict=True):
            parts.append(live[slot])
            parts.append(piece)
        return current_app.response_class("".join(parts), mimetype="application/json")


class StatusCache:
    def __init__(self, ttl: float, max_entries: int = MAX_RECORDS, max_followed: int = MAX_FOLLOWED) -> None:
        self.entries: InvalidatingCache[str, CachedStatus] = InvalidatingCache(ttl, max_entries)
        self.max_followed = max_followed
        # Execution ids whose channels are followed, the least recently filled first.
        self._followed: OrderedDict[str, None] = OrderedDict()
        self._listening: Listening | None = None

    def hear_through(self, listening: Listening) -> None:
        """Follow each filled execution's channel on `listening`, and store its record only once that is heard."""
        self._listening = listening
        self.entries.follows = self._follows

    def _follows(self, execution_id: str) -> bool:
        assert self._listening is not None
        self._followed[execution_id] = None
        self._followed.move_to_end(execution_id)
        while len(self._followed) > self.max_followed:
            gone, _ = self._followed.popitem(last=False)
            self._listening.unfollow(execution_channel(gone))
            self.entries.invalidate(gone)  # no longer heard: neither its entry nor a fill under way may stay
        return self._listening.follow(execution_channel(execution_id))

    def clear(self) -> None:
        self.entries.clear()


async def serve_status(execution_id: str, caller: Caller, chat_url_of: Callable[[str], str]) -> Response:
    """The status record of the caller's execution (404 for an unknown id or another account's)."""

    async def read() -> CachedStatus:
        session = db_session()
        execution = await session.get(Execution, execution_id)
        if execution is None:
            raise not_found("execution")
        record, facts = await record_and_facts(session, execution)
        return CachedStatus.of(execution.user_id, record, facts)

    # Read by whichever request missed first, owner or not: ownership is judged here, for each request.
    cached = await app_services().status_cache.entries.get_or_fill(execution_id, read)
    if cached is None or cached.user_id != caller.user_id:
        raise not_found("execution")
    return cached.response(chat_url_of(execution_id))


def listen_for_invalidations(bus: Bus, keys: ApiKeyCache, statuses: StatusCache) -> Listening:
    """Wire both caches to the bus: events and cache messages invalidate, a listener reset clears, and neither
    stores anything while the listener cannot hear (the status cache: nothing of an execution whose channel it
    does not hear yet)."""

    def on_message(channel: str, message: dict[str, Any]) -> None:
        if channel.startswith(EXECUTION_CHANNEL_PREFIX):
            statuses.entries.invalidate(channel[len(EXECUTION_CHANNEL_PREFIX) :])
            return
        for execution_id in message.get("executions") or ():
            statuses.entries.invalidate(str(execution_id))
        keys.on_message(message)

    def on_reset() -> None:
        keys.clear()
        statuses.clear()

    listening = bus.listen(
        (CACHE_CHANNEL,),
        on_message,
        on_reset,
        followed=(EXECUTION_CHANNEL_PREFIX,),
        name="the caches' bus listener",
        meanwhile="caches are cleared and bypassed",
    )
    keys.entries.hearing = statuses.entries.hearing = lambda: listening.healthy
    statuses.hear_through(listening)
    return listening
