"""A real browser (Debian's chromium under Playwright) against a real server: the whole life of a key.

Sign in, create a key, copy it with the copy button, use it against the API, revoke it through the
confirmation page, and see the next API call refused. The browser must be there: a missing chromium
fails this test rather than skipping it (.ci/run installs it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from core.accounts import create_user
from core.db import Database
from core.models import utcnow
from core.settings import Settings
from tests.support.live import HTTP_TIMEOUT, at_own_address, live_server

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
EMAIL = "browser@example.com"
PASSWORD = "correct horse battery"


@pytest.fixture
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


async def api_create(base: str, key: str) -> httpx.Response:
    async with httpx.AsyncClient(
        timeout=HTTP_TIMEOUT, base_url=base, headers={"Authorization": f"Bearer {key}"}
    ) as client:
        return await client.post(
            "/api/eval/create-task-agent",
            json={"taskName": "from the browser", "taskDescription": "Summarise.", "testMode": "without-verification"},
        )


async def test_key_lifecycle_in_a_real_browser(settings: Settings, db: Database, chromium: Browser) -> None:
    async with db.transaction() as session:
        await create_user(session, EMAIL, PASSWORD)
    own, port = at_own_address(settings)
    with live_server(own, run_worker=False, port=port) as base:
        context = await chromium.new_context(base_url=base)
        await context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
        page: Page = await context.new_page()
        problems: list[str] = []
        # A CSP violation (an inline script, say) shows up only as a console error; it must not happen.
        page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda error: problems.append(str(error)))
        page.on("response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 else None)

        # A stranger asking for the keys page is sent to sign in, and back afterwards.
        await page.goto("/keys")
        await expect(page).to_have_url(f"{base}/signin?next=%2Fkeys")
        await page.get_by_label("E-mail").fill(EMAIL)
        await page.get_by_label("Password").fill(PASSWORD)
        await page.get_by_role("button", name="Sign in").click()
        await expect(page).to_have_url(f"{base}/keys")
        cookies = {cookie["name"]: cookie for cookie in await context.cookies()}
        session_cookie = cookies["__Host-vouch_session"]
        assert session_cookie["secure"] and session_cookie["httpOnly"] and session_cookie["sameSite"] == "Lax"

        # Create a key with two scopes and the default expiry.
        await page.get_by_role("link", name="Create a key").click()
        await page.get_by_label("Name").fill("browser key")
        await page.get_by_label("Description").fill("made in chromium")
        await page.get_by_role("checkbox", name="eval:create").check()
        await page.get_by_role("checkbox", name="eval:read").check()
        await expect(page.get_by_role("radio", name="In 30 days")).to_be_checked()
        await page.get_by_role("button", name="Create key").click()
        await expect(page.get_by_role("heading", name="Key “browser key” created")).to_be_visible()

        # The copy button exists only with JavaScript (copy.js), and puts the key on the clipboard.
        shown = await page.locator("#new-key").input_value()
        assert shown.startswith("svc_eval_") and len(shown) == 41
        copy = page.get_by_role("button", name="Copy")
        await expect(copy).to_be_visible()
        await copy.click()
        await expect(page.locator("#copy-status")).to_have_text("Copied to the clipboard.")
        secret = await page.evaluate("navigator.clipboard.readText()")
        assert secret == shown

        created = await api_create(base, secret)
        assert created.status_code == 201, created.text

        # The list never shows the secret again; it shows the key by its hint.
        await page.get_by_role("link", name="Done, back to my keys").click()
        await expect(page).to_have_url(f"{base}/keys")
        assert secret not in await page.content()
        card = page.locator("article.key", has_text="browser key")
        await expect(card.locator(".key-hint")).to_have_text(f"svc_eval_…{secret[-4:]}")
        await expect(card.locator(".key-scopes")).to_have_text("eval:create eval:read")

        # Revoke through the confirmation page.
        await card.get_by_role("link", name="Revoke…").click()
        await expect(page.get_by_role("heading", name="Revoke “browser key”?")).to_be_visible()
        await page.get_by_role("button", name="Yes, revoke this key").click()
        await expect(page.get_by_role("status")).to_contain_text("Key “browser key” is revoked.")
        await expect(page.locator("article.key.state-revoked", has_text="browser key")).to_be_visible()

        refused = await api_create(base, secret)
        assert refused.status_code == 401, refused.text
        assert refused.json()["code"] == "api_key_revoked"

        # Signing out ends the session: the keys page asks for a sign-in again.
        await page.get_by_role("button", name="Sign out").click()
        await expect(page).to_have_url(f"{base}/signin?signed_out=1")
        await page.goto("/keys")
        await expect(page).to_have_url(f"{base}/signin?next=%2Fkeys")
        assert problems == []
        await context.close()


async def test_pages_work_without_javascript(settings: Settings, db: Database, chromium: Browser) -> None:
    async with db.transaction() as session:
        await create_user(session, EMAIL, PASSWORD)
    own, port = at_own_address(settings)
    with live_server(own, run_worker=False, port=port) as base:
        context = await chromium.new_context(base_url=base, java_script_enabled=False)
        page = await context.new_page()
        await page.goto("/signin")
        await page.get_by_label("E-mail").fill(EMAIL)
        await page.get_by_label("Password").fill(PASSWORD)
        await page.get_by_role("button", name="Sign in").click()
        await expect(page).to_have_url(f"{base}/keys")  # signed in before going on
        await page.goto("/keys/new")
        await page.get_by_label("Name").fill("no-js key")
        await page.get_by_role("button", name="Create key").click()
        # No scope chosen: the server says so, and the form keeps what was typed.
        await expect(page.locator("#scope-error")).to_have_text("Choose at least one scope.")
        await expect(page.get_by_label("Name")).to_have_value("no-js key")
        await page.get_by_role("checkbox", name="eval:manage").check()
        await page.get_by_role("radio", name="On a date").check()
        chosen = (utcnow().date() + timedelta(days=45)).isoformat()
        await page.get_by_label("Expiry date").fill(chosen)
        await page.get_by_role("button", name="Create key").click()
        await expect(page.locator("dl.facts")).to_contain_text(f"{chosen} 00:00 UTC")
        # Without JavaScript the copy button stays hidden; the key sits in a readonly field to copy by hand.
        await expect(page.get_by_role("button", name="Copy")).to_be_hidden()
        secret = await page.locator("#new-key").input_value()
        assert (await api_create(base, secret)).status_code == 201
        await page.goto("/keys")
        await page.locator("article.key", has_text="no-js key").get_by_role("link", name="Revoke…").click()
        await page.get_by_role("button", name="Yes, revoke this key").click()
        await expect(page.get_by_role("status")).to_contain_text("is revoked")
        assert (await api_create(base, secret)).status_code == 401
        await context.close()


async def test_reloading_the_new_key_page_makes_no_second_key_and_shows_the_secret_no_more(
    settings: Settings, db: Database, chromium: Browser
) -> None:
    async with db.transaction() as session:
        await create_user(session, EMAIL, PASSWORD)
    own, port = at_own_address(settings)
    with live_server(own, run_worker=False, port=port) as base:
        context = await chromium.new_context(base_url=base)
        page = await context.new_page()
        posts: list[str] = []
        page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
        await page.goto("/signin?next=/keys/new")
        await page.get_by_label("E-mail").fill(EMAIL)
        await page.get_by_label("Password").fill(PASSWORD)
        await page.get_by_role("button", name="Sign in").click()
        await page.get_by_label("Name").fill("reloaded key")
        await page.get_by_role("checkbox", name="eval:manage").check()
        await page.get_by_role("button", name="Create key").click()
        await expect(page.get_by_role("heading", name="Key “reloaded key” created")).to_be_visible()
        assert page.url.startswith(f"{base}/keys/key_") and page.url.endswith("/created")  # after a redirect
        secret = await page.locator("#new-key").input_value()
        assert posts == [f"{base}/signin", f"{base}/keys"]

        await page.reload()
        await expect(page.get_by_role("heading", name="Key “reloaded key” created")).to_be_visible()
        await expect(page.locator("#key-already-shown")).to_contain_text("shown once")
        await expect(page.locator("#new-key")).to_have_count(0)
        assert secret not in await page.content()
        assert posts == [f"{base}/signin", f"{base}/keys"]  # the reload posted nothing

        await page.goto("/keys")
        await expect(page.locator("article.key", has_text="reloaded key")).to_have_count(1)
        assert (await api_create(base, secret)).status_code == 201  # the one shown is the one made
        await context.close()
