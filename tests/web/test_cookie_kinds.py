"""The browser cookies for each kind of address the service is reached at: https (`__Host-` and Secure), http on
loopback (the same: browsers count loopback as secure), and http anywhere else (neither, or no browser keeps them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from http.cookies import SimpleCookie

import pytest

from api.app import create_app
from core.accounts import create_user
from core.settings import Settings
from tests.web.browser import Browser
from tests.web.conftest import Site

PASSWORD = "correct horse battery"

KINDS = {
    "https base URL": ({"base_url": "https://vouch.example.org"}, True),
    "http on loopback": ({"base_url": None, "listen_address": ("127.0.0.1", 8000)}, True),
    "http localhost base URL": ({"base_url": "http://localhost:8000"}, True),
    "http on a LAN address": ({"base_url": "http://192.168.1.20:8000"}, False),
    "http on all addresses": ({"base_url": None, "listen_address": ("0.0.0.0", 8000)}, False),
}


@pytest.fixture(params=list(KINDS))
async def kind(request: pytest.FixtureRequest, settings: Settings) -> AsyncIterator[tuple[Site, bool]]:
    changes, secure = KINDS[request.param]
    changed = settings.with_changes(**changes)
    app = create_app(changed, run_worker=False)
    async with app.test_app():
        site = Site(app, changed)
        async with site.db.transaction() as session:
            await create_user(session, "ann@example.com", PASSWORD)
        yield site, secure


def _attributes(raw: str) -> tuple[str, dict[str, str]]:
    jar: SimpleCookie = SimpleCookie()
    jar.load(raw)
    [(name, morsel)] = list(jar.items())
    flags = {key: str(value) for key, value in morsel.items() if value}
    return name, flags


def _expected(name: str, secure: bool) -> str:
    return f"__Host-{name}" if secure else name


async def test_cookies_for_each_kind_of_address(kind: tuple[Site, bool]) -> None:
    site, secure = kind
    browser = Browser(site.app)
    form = await browser.get("/signin")
    [presession] = form.set_cookies()
    name, flags = _attributes(presession)
    assert name == _expected("vouch_presession", secure)  # the CSRF cookie before sign-in
    assert bool(flags.get("secure")) == secure
    assert flags["httponly"] and flags["path"] == "/" and flags["samesite"] == "Lax" and "domain" not in flags

    signed_in = await browser.post(
        "/signin", {"csrf_token": form.csrf(), "email": "ann@example.com", "password": PASSWORD}
    )
    assert signed_in.status == 303, signed_in.text
    [session_cookie] = signed_in.set_cookies()
    name, flags = _attributes(session_cookie)
    assert name == _expected("vouch_session", secure)
    assert bool(flags.get("secure")) == secure
    assert flags["httponly"] and flags["path"] == "/" and flags["samesite"] == "Lax" and "domain" not in flags
    assert (await browser.get("/keys")).status == 200  # the cookie it set is the one it reads

    # The new key's one-time pad (api/pages/key_reveal.py) follows the same rule.
    keys_form = await browser.get("/keys/new")
    posted = await browser.post(
        "/keys", {"csrf_token": keys_form.csrf(), "name": "ci", "scope": "eval:read", "expiry": "30"}
    )
    assert posted.status == 303
    [pad] = posted.set_cookies()
    name, flags = _attributes(pad)
    assert name == _expected("vouch_new_key", secure) and bool(flags.get("secure")) == secure

    signed_out = await browser.post("/signout", {"csrf_token": (await browser.get("/keys")).csrf()})
    assert signed_out.status == 303
    [cleared] = signed_out.set_cookies()
    name, flags = _attributes(cleared)
    assert name == _expected("vouch_session", secure) and flags["max-age"] == "0"
