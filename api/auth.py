"""Bearer API-key authentication and scope checks for the REST API (spec §5, §7)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import wraps
from typing import ParamSpec, TypeVar

from quart import g, request
from sqlalchemy.ext.asyncio import AsyncSession

from api.app_services import AppServices, app_services
from api.problems import ApiError, not_found, unauthorized
from api.ratelimit_http import charge_request
from core import apikeys
from core.models import Execution, utcnow

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Caller:
    user_id: str
    email: str
    key_id: str
    scopes: frozenset[str]


def current_caller() -> Caller:
    caller: Caller = g.caller
    return caller


async def authenticate() -> Caller:
    return await caller_of(app_services(), request.headers.get("Authorization"), request.remote_addr)


async def caller_of(found: AppServices, header: str | None, remote_addr: str | None) -> Caller:
    """Who an `Authorization: Bearer <API key>` header names (401 otherwise): REST's check, and MCP's
    (api/mcp_server.py)."""
    if not header:
        raise unauthorized("missing_api_key", "send your API key as 'Authorization: Bearer svc_eval_…'")
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret or " " in secret:
        raise unauthorized("malformed_authorization", "the Authorization header must be 'Bearer <API key>'")
    # This runs before every API request: the key and its owner come from the process's key cache
    # (core/auth_cache.py), which reads the database only on a miss.
    key = await found.auth_cache.find(secret, found.settings.secret_key, found.db)
    if key is None:
        raise unauthorized("invalid_api_key", "this API key is not valid")
    now = utcnow()
    # Judged against this request's clock, never cached: a key that expired a moment ago is refused now.
    state = key.state(now)
    if state != "active":
        raise unauthorized(f"api_key_{state}", f"this API key has been {state}")
    # Counted in memory and written in batches (api/usage.py): no write per request.
    found.usage.record(key.key_id, remote_addr, now)
    return Caller(key.user_id, key.email, key.key_id, key.scopes)


def lacks_scope(caller: Caller, scope: str) -> ApiError | None:
    if scope in caller.scopes:
        return None
    return ApiError(
        403,
        "insufficient_scope",
        f"this API key lacks the {scope} scope",
        headers={"WWW-Authenticate": f'Bearer realm="vouch", error="insufficient_scope", scope="{scope}"'},
    )


def require_scope(scope: str) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Authenticate the request and demand `scope` (401 without a usable key, 403 without the scope)."""
    if scope not in apikeys.SCOPES:
        raise ValueError(f"unknown scope {scope}")

    def decorate(view: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @wraps(view)
        async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            caller = await authenticate()
            # Every request made with a valid key counts (spec §8), a 403 for a missing scope included.
            await charge_request(caller.key_id)
            refused = lacks_scope(caller, scope)
            if refused is not None:
                raise refused
            g.caller = caller
            return await view(*args, **kwargs)

        return guarded

    return decorate


async def owned_execution(session: AsyncSession, execution_id: str, caller: Caller) -> Execution:
    """The caller's execution; another user's id is indistinguishable from an unknown one."""
    execution = await session.get(Execution, execution_id)
    if execution is None or execution.user_id != caller.user_id:
        raise not_found("execution")
    return execution
