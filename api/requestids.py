"""A request id on every response (`X-Request-Id`) and in every log line of the request.

A caller's own id is kept when it is sane, so one id can follow a call through the
caller's logs and ours; anything else (too long, odd characters that could forge log
lines or headers) is replaced by a fresh one.
"""

from __future__ import annotations

import re
import secrets

from quart import Quart, Response, g, request

from core.logs import current_request_id

HEADER = "X-Request-Id"
_SANE = re.compile(r"[A-Za-z0-9._-]{1,128}")


def new_request_id() -> str:
    return "req_" + secrets.token_hex(12)


def accepted_request_id(offered: str | None) -> str:
    """The caller's id if it is 1 to 128 of [A-Za-z0-9._-], else a new one."""
    if offered is not None and _SANE.fullmatch(offered):
        return offered
    return new_request_id()


def request_id() -> str:
    """This request's id (assigned on first use if a hook ran before ours)."""
    found: str | None = g.get("request_id")
    if found is None:
        found = g.request_id = accepted_request_id(request.headers.get(HEADER))
    return found


async def _assign() -> None:
    g.request_id_token = current_request_id.set(request_id())


async def _stamp(response: Response) -> Response:
    response.headers[HEADER] = request_id()
    return response


async def _forget(_exc: BaseException | None) -> None:
    token = g.pop("request_id_token", None)
    if token is not None:
        current_request_id.reset(token)


def install_request_ids(app: Quart) -> None:
    """Register the hooks; call before other before_request hooks so their logs carry the id."""
    app.before_request(_assign)
    app.after_request(_stamp)
    app.teardown_request(_forget)
