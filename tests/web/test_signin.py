"""Signing in and out: cookies, the same answer for every bad credential, throttling, session rotation."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
import sqlalchemy as sa

from api.signin import ADDRESS_LIMIT, BAD_CREDENTIALS, EMAIL_LIMIT, WINDOW
from core.accounts import create_user
from core.models import SigninFailure, WebSession, utcnow
from core.web.sessions import (
    ABSOLUTE_LIFETIME,
    IDLE_LIFETIME,
    PRESESSION_COOKIE,
    SESSION_COOKIE,
    safe_next,
    token_digest,
)
from tests.web.browser import Browser, Page, session_count
from tests.web.conftest import Site

PASSWORD = "correct horse battery"


@pytest.fixture
async def alice(site: Site) -> str:
    async with site.db.transaction() as session:
        user = await create_user(session, "alice@example.com", PASSWORD)
        return user.email


async def sign_in(browser: Browser, email: str, password: str, *, next_path: str | None = None) -> Page:
    query = f"?next={next_path}" if next_path is not None else ""
    page = await browser.get(f"/signin{query}")
    assert page.status == 200, page.text
    return await browser.post(
        "/signin",
        {"csrf_token": page.csrf(), "email": email, "password": password, "next": safe_next(next_path)},
    )


async def test_sign_in_sets_a_host_cookie_and_stores_only_its_hmac(site: Site, alice: str) -> None:
    browser = site.browser()
    page = await sign_in(browser, "Alice@Example.com ", PASSWORD)
    assert page.status == 303 and page.location == "/keys"
    [cookie] = [c for c in page.set_cookies() if c.startswith(SESSION_COOKIE + "=")]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"secure", "httponly", "path"} <= attributes
    assert "samesite=lax" in cookie.lower() and "domain" not in attributes
    token = browser.cookies[SESSION_COOKIE]
    async with site.db.reading() as session:
        [row] = list(await session.scalars(sa.select(WebSession)))
    assert row.id == token_digest(site.settings.secret_key, "session", token) and token not in row.id
    keys = await browser.get("/keys")
    assert keys.status == 200 and "alice@example.com" in keys.text


async def test_wrong_password_and_unknown_user_get_the_same_answer(site: Site, alice: str) -> None:
    browser = site.browser()  # one browser, so the pages' CSRF tokens match too
    wrong = await sign_in(browser, alice, "not the password")
    unknown = await sign_in(browser, "nobody@example.com", PASSWORD)
    for page in (wrong, unknown):
        assert page.status == 401
        assert BAD_CREDENTIALS in page.text
        assert SESSION_COOKIE not in " ".join(page.set_cookies())
    assert wrong.text.replace(alice, "E") == unknown.text.replace("nobody@example.com", "E")
    assert await session_count(site.db) == 0


async def test_failures_for_one_email_are_throttled_until_the_window_passes(site: Site, alice: str) -> None:
    browser = site.browser()
    for _ in range(EMAIL_LIMIT):
        assert (await sign_in(browser, alice, "guess")).status == 401
    # Now even the right password is refused, with a message that says why and for how long.
    refused = await sign_in(browser, alice, PASSWORD)
    assert refused.status == 429, refused.text
    assert "Too many failed sign-ins for this e-mail" in refused.text
    assert 0 < int(refused.headers["Retry-After"]) <= WINDOW.total_seconds()
    # Another address is refused too: the e-mail is what is being guessed at.
    assert (await sign_in(site.browser(addr="203.0.113.9"), alice, PASSWORD)).status == 429
    # Once the failures are older than the window, the right password works (and clears the count).
    async with site.db.transaction() as session:
        await session.execute(sa.update(SigninFailure).values(at=utcnow() - WINDOW - timedelta(seconds=1)))
    assert (await sign_in(browser, alice, PASSWORD)).status == 303


async def test_failures_from_one_address_are_throttled(site: Site, alice: str) -> None:
    now = utcnow()
    async with site.db.transaction() as session:
        session.add_all(
            SigninFailure(email=f"u{i}@example.com", remote_addr="198.51.100.77", at=now - timedelta(minutes=1))
            for i in range(ADDRESS_LIMIT)
        )
    refused = await sign_in(site.browser(addr="198.51.100.77"), alice, PASSWORD)
    assert refused.status == 429
    assert "Too many failed sign-ins from your address" in refused.text
    assert (await sign_in(site.browser(addr="198.51.100.78"), alice, PASSWORD)).status == 303


async def test_signing_in_always_issues_a_new_session_id(site: Site, alice: str) -> None:
    browser = site.browser()
    await sign_in(browser, alice, PASSWORD)
    first = browser.cookies[SESSION_COOKIE]
    # A browser arriving with a session cookie someone else chose (fixation) or an old one of its own:
    # signing in replaces it, and the old id stops working.
    other = site.browser(addr="203.0.113.5")
    form = await other.get("/signin")
    other.cookies[SESSION_COOKIE] = first
    signed = await other.post("/signin", {"csrf_token": form.csrf(), "email": alice, "password": PASSWORD})
    assert signed.status == 303
    second = other.cookies[SESSION_COOKIE]
    assert second != first
    assert await session_count(site.db) == 1
    assert (await Browser(site.app, cookies={SESSION_COOKIE: first}).get("/keys")).status == 303
    assert (await Browser(site.app, cookies={SESSION_COOKIE: second}).get("/keys")).status == 200


async def test_sign_out_ends_the_session_on_the_server(site: Site) -> None:
    browser, _ = await site.signed_in("bob@example.com")
    token = browser.cookies[SESSION_COOKIE]
    out = await browser.submit("/keys", "/signout", {})
    assert out.status == 303 and out.location == "/signin?signed_out=1"
    assert SESSION_COOKIE not in browser.cookies
    assert await session_count(site.db) == 0
    # A copy of the old cookie is worth nothing now.
    replay = await Browser(site.app, cookies={SESSION_COOKIE: token}).get("/keys")
    assert replay.status == 303 and replay.location is not None and replay.location.startswith("/signin")


async def test_pages_send_strangers_to_sign_in_and_back(site: Site, alice: str) -> None:
    browser = site.browser()
    bounced = await browser.get("/keys/new")
    assert bounced.status == 303 and bounced.location is not None
    target = urlsplit(bounced.location)
    assert target.path == "/signin" and parse_qs(target.query)["next"] == ["/keys/new"]
    form = await browser.get(bounced.location)
    assert 'name="next" value="/keys/new"' in form.text
    signed = await browser.post(
        "/signin", {"csrf_token": form.csrf(), "email": alice, "password": PASSWORD, "next": "/keys/new"}
    )
    assert signed.location == "/keys/new"


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/",
        "//evil.example/keys",
        "/\\evil.example",
        "\\\\evil.example",
        "javascript:alert(1)",
        "/keys\r\nLocation: https://evil.example",
        "/\tevil",
        "keys",
        "",
        None,
    ],
)
def test_next_is_only_ever_a_local_path(target: str | None) -> None:
    assert safe_next(target) == "/keys"


def test_next_keeps_local_paths_with_queries() -> None:
    assert safe_next("/keys?revoked=key_1") == "/keys?revoked=key_1"
    assert safe_next("/") == "/"


async def test_sign_in_ignores_a_foreign_next(site: Site, alice: str) -> None:
    browser = site.browser()
    form = await browser.get("/signin?next=https://evil.example/")
    assert 'name="next" value="/keys"' in form.text
    signed = await browser.post(
        "/signin", {"csrf_token": form.csrf(), "email": alice, "password": PASSWORD, "next": "//evil.example/"}
    )
    assert signed.status == 303 and signed.location == "/keys"


async def test_signed_in_visitor_of_signin_goes_on(site: Site) -> None:
    browser, _ = await site.signed_in("carol@example.com")
    page = await browser.get("/signin?next=/keys/new")
    assert page.status == 303 and page.location == "/keys/new"


async def test_presession_cookie_is_a_host_cookie(site: Site) -> None:
    page = await site.browser().get("/signin")
    [cookie] = [c for c in page.set_cookies() if c.startswith(PRESESSION_COOKIE + "=")]
    assert "Secure" in cookie and "HttpOnly" in cookie and "Path=/" in cookie and "Domain" not in cookie


async def test_a_used_session_slides_and_an_idle_one_ends(site: Site) -> None:
    browser, _ = await site.signed_in("dan@example.com")
    now = utcnow()
    async with site.db.transaction() as session:
        await session.execute(
            sa.update(WebSession).values(last_seen_at=now - timedelta(days=1), expires_at=now + timedelta(days=13))
        )
    page = await browser.get("/keys")
    assert page.status == 200
    async with site.db.reading() as session:
        row = await session.scalar(sa.select(WebSession))
    assert row is not None and row.expires_at >= now + IDLE_LIFETIME and row.last_seen_at >= now
    [cookie] = [c for c in page.set_cookies() if c.startswith(SESSION_COOKIE + "=")]
    max_age = int(re.search(r"Max-Age=(\d+)", cookie).group(1))  # type: ignore[union-attr]
    assert IDLE_LIFETIME.total_seconds() - 60 <= max_age <= IDLE_LIFETIME.total_seconds()
    # Unused past its expiry, the session is gone, whatever the browser still holds.
    async with site.db.transaction() as session:
        await session.execute(sa.update(WebSession).values(expires_at=now - timedelta(seconds=1)))
    assert (await browser.get("/keys")).status == 303


async def test_a_busy_session_still_ends_at_its_absolute_lifetime(site: Site) -> None:
    browser, _ = await site.signed_in("eve@example.com")
    now = utcnow()
    created = now - ABSOLUTE_LIFETIME + timedelta(hours=1)
    async with site.db.transaction() as session:
        await session.execute(sa.update(WebSession).values(created_at=created, last_seen_at=now - timedelta(hours=1)))
    assert (await browser.get("/keys")).status == 200
    async with site.db.reading() as session:
        row = await session.scalar(sa.select(WebSession))
    assert row is not None and row.expires_at == created + ABSOLUTE_LIFETIME


async def test_a_nul_character_in_a_form_field_is_a_bad_request_not_a_server_error(site: Site, alice: str) -> None:
    # PostgreSQL can neither store nor compare text holding U+0000.
    page = await sign_in(site.browser(), "a\x00b@example.com", PASSWORD)
    assert page.status == 400
    async with site.db.reading() as session:
        assert await session.scalar(sa.select(sa.func.count()).select_from(SigninFailure)) == 0
