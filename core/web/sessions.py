"""Browser sessions for the web pages: the session cookie, CSRF tokens and `login_required`.

The cookie carries a random token; the database holds only HMAC-SHA256(secret_key, token) as the session
id, so a copy of the database signs no one in. Sessions slide: each use (written at most every few minutes)
pushes the idle expiry out, up to an absolute lifetime. Every form carries a CSRF token: once signed in, the
session's own token; before that (sign-in, sign-up), an HMAC of a random pre-session cookie, so an attacker's
page cannot sign a victim in to the attacker's account either.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import wraps
from typing import ParamSpec, TypeVar
from urllib.parse import urlencode, urlsplit

import sqlalchemy as sa
from quart import Response, after_this_request, g, request
from sqlalchemy.ext.asyncio import AsyncSession
from werkzeug.sansio.response import Response as AnyResponse
from werkzeug.wrappers import Response as WerkzeugResponse

from core.models import User, WebSession, utcnow
from core.web.services import db_session, services

# What Quart hands an after-request callback.
Answer = Response | WerkzeugResponse
P = ParamSpec("P")
R = TypeVar("R")

SESSION_COOKIE = "__Host-vouch_session"
PRESESSION_COOKIE = "__Host-vouch_presession"
# On plain http at an address other than loopback (a LAN box, a VM) browsers keep no Secure cookie, and a
# `__Host-` one must be Secure: there these go without both (`cookie_name`, `Settings.secure_cookies`).
CSRF_FIELD = "csrf_token"
# A session ends after IDLE_LIFETIME unused, and after ABSOLUTE_LIFETIME however busy (expires_at holds the sooner).
IDLE_LIFETIME = timedelta(days=14)
ABSOLUTE_LIFETIME = timedelta(days=30)
# Sliding the expiry is a write; doing it on every page view would make reads into writes.
SLIDE_EVERY = timedelta(minutes=5)
DEFAULT_NEXT = "/keys"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class CsrfError(Exception):
    """A form came without a valid CSRF token: 400 when missing, 403 when wrong."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Viewer:
    """Who is signed in, as the pages need it."""

    user_id: str
    email: str
    csrf_token: str
    session_id: str


def token_digest(secret_key: bytes, purpose: str, token: str) -> str:
    """What the server keeps of a token: an HMAC, separated by purpose so one can never pass for another."""
    return hmac.new(secret_key, f"{purpose}:{token}".encode(), hashlib.sha256).hexdigest()


def _digest(purpose: str, token: str) -> str:
    return token_digest(services().settings.secret_key, purpose, token)


def _secure() -> bool:
    return services().settings.secure_cookies


def cookie_name(name: str) -> str:
    """The name a cookie goes by here: `name` (a `__Host-` one) where cookies are Secure, else without the prefix."""
    return name if _secure() else name.removeprefix("__Host-")


def read_cookie(name: str) -> str | None:
    return request.cookies.get(cookie_name(name))


def set_cookie(response: AnyResponse, name: str, value: str, max_age: timedelta | None) -> None:
    # `__Host-` demands Secure, Path=/ and no Domain: no other host or path can plant or read it.
    response.set_cookie(
        cookie_name(name),
        value,
        max_age=int(max_age.total_seconds()) if max_age else None,
        path="/",
        secure=_secure(),
        httponly=True,
        samesite="Lax",
    )


def clear_cookie(response: AnyResponse, name: str) -> None:
    response.delete_cookie(cookie_name(name), path="/", secure=_secure(), httponly=True, samesite="Lax")


def client_addr() -> str | None:
    return request.remote_addr or None


async def start_session(session: AsyncSession, user: User, response: Response) -> Viewer:
    """Sign `user` in: a brand-new session id (never a reused one), the old one (if any) ended."""
    await end_session(session, response)
    now = utcnow()
    token = secrets.token_urlsafe(32)
    record = WebSession(
        id=_digest("session", token),
        user_id=user.id,
        csrf_token=secrets.token_urlsafe(32),
        created_at=now,
        last_seen_at=now,
        expires_at=now + IDLE_LIFETIME,
        remote_addr=client_addr(),
        user_agent=(request.headers.get("User-Agent") or "")[:300] or None,
    )
    session.add(record)
    # Signed-in users are a small table's worth; sweeping expired rows here keeps it that way.
    await session.execute(sa.delete(WebSession).where(WebSession.expires_at < now))
    set_cookie(response, SESSION_COOKIE, token, IDLE_LIFETIME)
    viewer = Viewer(user.id, user.email, record.csrf_token, record.id)
    g.viewer = viewer
    return viewer


async def end_session(session: AsyncSession, response: Response) -> None:
    """Sign out server-side: the row goes, so the cookie is worthless even if kept."""
    token = read_cookie(SESSION_COOKIE)
    if token:
        await session.execute(sa.delete(WebSession).where(WebSession.id == _digest("session", token)))
        clear_cookie(response, SESSION_COOKIE)
    g.viewer = None


async def current_viewer() -> Viewer | None:
    """The signed-in user of this request, or None; slides the session's expiry now and then."""
    if "viewer" in g:
        found: Viewer | None = g.viewer
        return found
    g.viewer = None
    token = read_cookie(SESSION_COOKIE)
    if not token or len(token) > 100:
        return None
    session = db_session()
    row = await session.execute(
        sa.select(WebSession, User.email)
        .join(User, User.id == WebSession.user_id)
        .where(WebSession.id == _digest("session", token), User.disabled_at.is_(None))
    )
    found_row = row.first()
    if found_row is None:
        return None
    record, email = found_row
    now = utcnow()
    if record.expires_at <= now:
        return None
    if now - record.last_seen_at >= SLIDE_EVERY:
        expires_at = min(now + IDLE_LIFETIME, record.created_at + ABSOLUTE_LIFETIME)
        await _slide(session, record.id, now, expires_at)

        @after_this_request
        async def refresh_cookie(response: Answer) -> Answer:
            set_cookie(response, SESSION_COOKIE, token, expires_at - now)
            return response

    viewer = Viewer(record.user_id, email, record.csrf_token, record.id)
    g.viewer = viewer
    return viewer


async def _slide(session: AsyncSession, session_id: str, now: datetime, expires_at: datetime) -> None:
    statement = sa.update(WebSession).where(WebSession.id == session_id).values(last_seen_at=now, expires_at=expires_at)
    if request.method in _SAFE_METHODS:
        # The request's session is read-only here; a short write of its own (SQLite's WAL lets it
        # proceed beside our open read).
        async with services().db.transaction() as writer:
            await writer.execute(statement)
    else:
        await session.execute(statement)


def presession_secret() -> str:
    """The browser's pre-session value (CSRF before sign-in); sets the cookie if it is missing."""
    raw = read_cookie(PRESESSION_COOKIE)
    if not raw or len(raw) > 100:
        raw = secrets.token_urlsafe(32)
        fresh = raw

        @after_this_request
        async def set_presession(response: Answer) -> Answer:
            set_cookie(response, PRESESSION_COOKIE, fresh, None)
            return response

    return raw


def presession_token() -> str:
    """The CSRF token for forms shown before sign-in."""
    return _digest("presession-csrf", presession_secret())


def _compare(sent: str | None, expected: str | None) -> None:
    if not sent:
        raise CsrfError(400, "This form was sent without its security token. Reload the page and try again.")
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise CsrfError(403, "This form's security token is not valid (it may have expired). Reload and try again.")


async def check_presession_csrf() -> None:
    form = await request.form
    raw = read_cookie(PRESESSION_COOKIE)
    _compare(form.get(CSRF_FIELD), _digest("presession-csrf", raw) if raw else None)


async def check_csrf(viewer: Viewer) -> None:
    form = await request.form
    _compare(form.get(CSRF_FIELD), viewer.csrf_token)


def safe_next(target: str | None) -> str:
    """Where to go after sign-in: only ever a path on this site, never another origin."""
    if not target or len(target) > 2000:
        return DEFAULT_NEXT
    # Browsers read `/\host` and `//host` as another origin, and drop tabs and newlines.
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return DEFAULT_NEXT
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in target):
        return DEFAULT_NEXT
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return DEFAULT_NEXT
    return target


def see_other(location: str) -> Response:
    """The answer to a form POST (or a bounce to sign-in): go GET `location`; never re-post."""
    return Response("", status=303, headers={"Location": location})


def signin_url(next_path: str | None = None) -> str:
    return "/signin" + (f"?{urlencode({'next': next_path})}" if next_path else "")


def signin_here() -> str:
    """The navigation's sign-in link: back to this page afterwards (a chat link, say), so a reviewer who signs in
    lands where they were; a template global (api/app.py)."""
    if request.method != "GET" or request.path in ("/", "/signin", "/signup"):
        return signin_url()
    return signin_url(safe_next(request.full_path.rstrip("?")))


def login_required(view: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R | Response]]:
    """Serve the view to a signed-in user; send anyone else to sign in, then back here.

    A POST must also carry the session's CSRF token."""

    @wraps(view)
    async def guarded(*args: P.args, **kwargs: P.kwargs) -> R | Response:
        viewer = await current_viewer()
        if viewer is None:
            back = request.full_path.rstrip("?") if request.method in _SAFE_METHODS else None
            return see_other(signin_url(safe_next(back) if back else None))
        if request.method not in _SAFE_METHODS:
            await check_csrf(viewer)
        return await view(*args, **kwargs)

    return guarded


def viewer() -> Viewer:
    """The signed-in user, inside a `login_required` view."""
    found: Viewer | None = g.get("viewer")
    if found is None:
        raise RuntimeError("viewer() outside a login_required view")
    return found
