"""`Idempotency-Key` on create: a retried request gets the first answer, never a second execution.

Same key and same body within 24 h → the stored response, replayed with `Idempotent-Replayed: true`.
Same key, other body → 422. Same key while the first request still runs → 409. Keys are per user.

The in-flight marker is committed in a short transaction of its own *before* the create runs,
so a concurrent request with the same key sees it (the unique (user_id, key) constraint settles
a tie). The final answer is written in the request's own transaction, together with the
execution: one commit, so there is never an execution without its answer or the reverse. If the
create fails, the marker is removed and the caller may retry with the same key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import wraps
from typing import Any, ParamSpec

import sqlalchemy as sa
from quart import Response, current_app, request
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import current_caller
from api.problems import ApiError
from core.db import Database, more_to_write
from core.ids import new_id
from core.models import IdempotencyRecord, utcnow
from core.web.services import db_session, services

log = logging.getLogger(__name__)
P = ParamSpec("P")

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
LIFETIME = timedelta(hours=24)
# A marker this old belongs to a request whose process died before it could clean up; a create
# takes milliseconds, so waiting this long before taking the key over cannot cut a live one short.
STALE_IN_FLIGHT = timedelta(minutes=5)
_KEY = re.compile(r"[\x20-\x7e]{1,255}")
_REPLAYED_HEADERS = ("Location",)


@dataclass(frozen=True)
class StoredAnswer:
    status: int
    body: Any
    headers: dict[str, str]


def idempotency_key() -> str | None:
    """The request's key, or None without one; 400 if it is not 1 to 255 printable ASCII characters."""
    values = request.headers.getlist(HEADER)
    if not values:
        return None
    key = values[0].strip()
    # The IETF draft sends the key as a structured-field string ("…"); plain tokens are common too.
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    if len(values) > 1 or not _KEY.fullmatch(key) or not key.strip():
        raise ApiError(
            400,
            "invalid_idempotency_key",
            f"send one {HEADER} of 1 to 255 printable ASCII characters",
            errors=[{"header": HEADER, "detail": "must be 1 to 255 printable ASCII characters"}],
        )
    return key


def request_fingerprint(method: str, path: str, body: bytes) -> str:
    """SHA-256 over the route and a canonical form of the JSON body (key order and spacing do not count)."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    except (ValueError, RecursionError):  # not JSON: the create refuses it anyway; compare the bytes
        canonical = body
    return hashlib.sha256(f"{method} {path}\n".encode() + canonical).hexdigest()


async def _claim(db: Database, user_id: str, key: str, fingerprint: str) -> str | StoredAnswer:
    """Commit an in-flight marker and return its id, or the stored answer to replay; 409/422 otherwise."""
    for _ in range(3):
        try:
            async with db.transaction() as session:
                return await _claim_in(session, user_id, key, fingerprint)
        except IntegrityError:
            continue  # a concurrent request inserted this key first: look again, it is in flight or done
    raise ApiError(409, "idempotency_key_in_use", "another request with this Idempotency-Key is in progress")


async def _claim_in(session: AsyncSession, user_id: str, key: str, fingerprint: str) -> str | StoredAnswer:
    now = utcnow()
    # Expired records are never answered again; clearing the user's old ones here keeps the table small.
    await session.execute(
        sa.delete(IdempotencyRecord).where(IdempotencyRecord.user_id == user_id, IdempotencyRecord.expires_at <= now)
    )
    record = await session.scalar(
        sa.select(IdempotencyRecord).where(IdempotencyRecord.user_id == user_id, IdempotencyRecord.key == key)
    )
    if record is not None and record.state == "in_flight" and record.created_at <= now - STALE_IN_FLIGHT:
        await session.execute(sa.delete(IdempotencyRecord).where(IdempotencyRecord.id == record.id))
        record = None
    if record is None:
        marker = IdempotencyRecord(
            id=new_id("idem"),
            user_id=user_id,
            key=key,
            request_hash=fingerprint,
            state="in_flight",
            created_at=now,
            expires_at=now + LIFETIME,
        )
        session.add(marker)
        await session.flush()
        return marker.id
    if record.request_hash != fingerprint:
        raise ApiError(
            422,
            "idempotency_key_reused",
            f"this {HEADER} was used with a different request body; use a new key for a new request",
            errors=[{"header": HEADER, "detail": "already used with a different body"}],
        )
    if record.state != "done" or record.response_status is None:
        raise ApiError(
            409,
            "idempotency_key_in_use",
            f"the first request with this {HEADER} is still in progress; retry shortly",
            headers={"Retry-After": "1"},
        )
    return StoredAnswer(record.response_status, record.response_body, dict(record.response_headers or {}))


async def _store(session: AsyncSession, marker_id: str, response: Response) -> None:
    await session.execute(
        sa.update(IdempotencyRecord)
        .where(IdempotencyRecord.id == marker_id)
        .values(
            state="done",
            response_status=response.status_code,
            response_body=await response.get_json(),
            response_headers={name: response.headers[name] for name in _REPLAYED_HEADERS if name in response.headers},
        ),
        execution_options={"synchronize_session": False},
    )


async def _release(db: Database, session: AsyncSession, marker_id: str) -> None:
    """Drop the marker of a failed create so that the same key may be retried."""
    try:
        # Roll back first: on SQLite the request's transaction holds the write lock the delete needs.
        await session.rollback()
        async with db.transaction() as cleanup:
            await cleanup.execute(
                sa.delete(IdempotencyRecord).where(
                    IdempotencyRecord.id == marker_id, IdempotencyRecord.state == "in_flight"
                )
            )
    except Exception:
        log.warning("could not release idempotency marker %s; it lapses after %s", marker_id, STALE_IN_FLIGHT)


async def _response(result: Any) -> Response:
    response = await current_app.make_response(result)
    if not isinstance(response, Response):  # views here return dicts and tuples, which become Quart responses
        raise TypeError(f"unexpected response type {type(response).__name__}")
    return response


async def _replay(answer: StoredAnswer) -> Response:
    # Built the way the original was (make_response of the same dict), so the bytes are the same.
    return await _response((answer.body, answer.status, {**answer.headers, REPLAYED_HEADER: "true"}))


def idempotent(view: Callable[P, Awaitable[Any]]) -> Callable[P, Awaitable[Response]]:
    """Honour `Idempotency-Key` on a view that creates; apply it inside `require_scope`."""

    @wraps(view)
    async def guarded(*args: P.args, **kwargs: P.kwargs) -> Response:
        key = idempotency_key()
        if key is None:
            return await _response(await view(*args, **kwargs))
        body = await request.get_data(cache=True, as_text=False, parse_form_data=False)
        fingerprint = request_fingerprint(request.method, request.path, body)
        db, session = services().db, db_session()
        if session.in_transaction():
            # On SQLite this request's write session has held the database lock since authentication
            # (reads only); end that transaction, or the marker's own one below could never begin.
            await db.commit(session)
        claimed = await _claim(db, current_caller().user_id, key, fingerprint)
        if isinstance(claimed, StoredAnswer):
            return await _replay(claimed)
        more_to_write(session)  # the answer, stored below in the view's own transaction
        try:
            response = await _response(await view(*args, **kwargs))
            if response.status_code >= 400:
                await _release(db, session, claimed)
                return response
            await _store(session, claimed, response)
            await db.commit(session)  # the execution and the answer to replay, in one commit
        except BaseException:
            await _release(db, session, claimed)
            raise
        return response

    return guarded
