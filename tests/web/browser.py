"""A browser stand-in over the Quart test client: keeps cookies as a browser would, reads forms' CSRF tokens.

Cookies are handled here rather than by the test client's jar so tests see (and can assert) exactly what the
server sets: `__Host-` cookies are Secure, which a jar may refuse over the test client's plain http.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlencode

import sqlalchemy as sa
from quart import Quart

from core.accounts import create_user
from core.db import Database
from core.models import WebSession, utcnow
from core.web.sessions import IDLE_LIFETIME, SESSION_COOKIE, token_digest

_CSRF = re.compile(r'name="csrf_token" value="([^"]*)"')


@dataclass
class Page:
    status: int
    headers: Any
    text: str

    @property
    def location(self) -> str | None:
        found: str | None = self.headers.get("Location")
        return found

    def csrf(self) -> str:
        found = _CSRF.search(self.text)
        assert found, f"no CSRF token on the page:\n{self.text[:2000]}"
        return found.group(1)

    def set_cookies(self) -> list[str]:
        return list(self.headers.getlist("Set-Cookie"))


@dataclass
class Browser:
    app: Quart
    addr: str = "198.51.100.7"
    cookies: dict[str, str] = field(default_factory=dict)

    async def _send(self, method: str, path: str, form: dict[str, Any] | None) -> Page:
        client = self.app.test_client(use_cookies=False)
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())} if self.cookies else {}
        if form is not None:
            # Encoded here, as a browser does: repeated fields (checkboxes) once per value.
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        response = await client.open(
            path,
            method=method,
            data=urlencode(form, doseq=True).encode() if form is not None else None,
            headers=headers,
            scheme="https",
            scope_base={"client": (self.addr, 50000)},
        )
        for raw in response.headers.getlist("Set-Cookie"):
            jar: SimpleCookie = SimpleCookie()
            jar.load(raw)
            for name, morsel in jar.items():
                if morsel["max-age"] == "0" or morsel.value == "":
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = morsel.value
        return Page(response.status_code, response.headers, await response.get_data(as_text=True))

    async def get(self, path: str) -> Page:
        return await self._send("GET", path, None)

    async def post(self, path: str, form: dict[str, Any]) -> Page:
        return await self._send("POST", path, form)

    async def submit(self, page_path: str, action: str, form: dict[str, Any]) -> Page:
        """GET the page that holds the form, then POST it with the page's CSRF token, as a person would."""
        page = await self.get(page_path)
        assert page.status == 200, page.text
        return await self.post(action, {"csrf_token": page.csrf(), **form})


async def signed_in_browser(app: Quart, db: Database, secret_key: bytes, email: str) -> tuple[Browser, str]:
    """A browser already signed in as a new user (no password: hashing costs ~0.2 s); (browser, user id).
    Signing in itself is tested through the form in test_signin.py."""
    token = secrets.token_urlsafe(32)
    now = utcnow()
    async with db.transaction() as session:
        user = await create_user(session, email)
        session.add(
            WebSession(
                id=token_digest(secret_key, "session", token),
                user_id=user.id,
                csrf_token=secrets.token_urlsafe(32),
                created_at=now,
                last_seen_at=now,
                expires_at=now + IDLE_LIFETIME,
            )
        )
        user_id = user.id
    return Browser(app, cookies={SESSION_COOKIE: token}), user_id


async def session_count(db: Database) -> int:
    async with db.reading() as session:
        return int(await session.scalar(sa.select(sa.func.count()).select_from(WebSession)) or 0)
