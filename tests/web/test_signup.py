"""Open sign-up: absent unless the operator turns it on (VOUCH_OPEN_SIGNUP=1)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa

from api.app import create_app
from api.websession import SESSION_COOKIE
from core.models import User
from core.settings import Settings, load_settings
from tests.web.conftest import Site


@pytest.fixture
async def open_site(settings: Settings) -> AsyncIterator[Site]:
    opened = settings.with_changes(open_signup=True)
    app = create_app(opened, run_worker=False)
    async with app.test_app():
        yield Site(app, opened)


def test_open_signup_is_off_unless_set(tmp_path: object) -> None:
    base = {"VOUCH_DATA_DIR": str(tmp_path), "VOUCH_SECRET_KEY": "x" * 40}
    assert load_settings(base).open_signup is False
    assert load_settings({**base, "VOUCH_OPEN_SIGNUP": "1"}).open_signup is True
    assert load_settings({**base, "VOUCH_OPEN_SIGNUP": "0"}).open_signup is False


async def test_sign_up_is_absent_by_default(site: Site) -> None:
    browser = site.browser()
    assert (await browser.get("/signup")).status == 404
    signin = await browser.get("/signin")
    refused = await browser.post(
        "/signup", {"csrf_token": signin.csrf(), "email": "new@example.com", "password": "long enough pw"}
    )
    assert refused.status == 404
    assert "/signup" not in signin.text and "/signup" not in (await browser.get("/")).text
    async with site.db.reading() as session:
        assert await session.scalar(sa.select(sa.func.count()).select_from(User)) == 0


async def test_open_sign_up_makes_an_account_and_signs_in(open_site: Site) -> None:
    browser = open_site.browser()
    assert "/signup" in (await browser.get("/signin")).text
    made = await browser.submit("/signup", "/signup", {"email": "New@Example.com", "password": "long enough pw"})
    assert made.status == 303 and made.location == "/keys"
    assert SESSION_COOKIE in browser.cookies
    keys = await browser.get("/keys")
    assert keys.status == 200 and "new@example.com" in keys.text
    async with open_site.db.reading() as session:
        user = await session.scalar(sa.select(User).where(User.email == "new@example.com"))
    assert user is not None and user.password_hash is not None and user.password_hash.startswith("$argon2id$")


@pytest.mark.parametrize(
    ("email", "password", "status", "message"),
    [
        ("not-an-address", "long enough pw", 422, "Enter a valid e-mail address."),
        ("short@example.com", "short", 422, "Choose a password of 8 to"),
    ],
)
async def test_sign_up_says_what_to_fix(open_site: Site, email: str, password: str, status: int, message: str) -> None:
    page = await open_site.browser().submit("/signup", "/signup", {"email": email, "password": password})
    assert page.status == status and message in page.text


async def test_sign_up_refuses_a_taken_email(open_site: Site) -> None:
    await open_site.signed_in("taken@example.com")
    page = await open_site.browser().submit("/signup", "/signup", {"email": "taken@example.com", "password": "x" * 12})
    assert page.status == 409 and "already exists" in page.text
