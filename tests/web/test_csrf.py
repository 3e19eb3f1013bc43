"""Every form POST needs its CSRF token: missing is 400, wrong is 403, and neither changes anything."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from api.app import create_app
from core.accounts import create_api_key, create_user
from core.models import ApiKey, User, WebSession
from core.settings import Settings
from tests.web.browser import Browser
from tests.web.conftest import Site


@dataclass
class Form:
    """A form: the page it is on, where it posts, a valid body without the token, and how to see it had no effect."""

    page: str
    action: str
    fields: dict[str, str]
    unchanged: Callable[[Site], Awaitable[bool]]


async def _count(site: Site, model: type, *where: sa.ColumnElement[bool]) -> int:
    async with site.db.reading() as session:
        return int(await session.scalar(sa.select(sa.func.count()).select_from(model).where(*where)) or 0)


async def no_new_session(site: Site) -> bool:
    return await _count(site, WebSession) == 1  # only the signed-in browser's own


async def no_new_user(site: Site) -> bool:
    return await _count(site, User) == 2


async def no_new_key(site: Site) -> bool:
    return await _count(site, ApiKey) == 1


async def key_not_revoked(site: Site) -> bool:
    return await _count(site, ApiKey, ApiKey.revoked_at.is_not(None)) == 0


FORMS = {
    "signin": Form("/signin", "/signin", {"email": "pat@example.com", "password": "correct horse"}, no_new_session),
    "signup": Form("/signup", "/signup", {"email": "new@example.com", "password": "long enough pw"}, no_new_user),
    "signout": Form("/keys", "/signout", {}, no_new_session),
    "create key": Form("/keys/new", "/keys", {"name": "k", "scope": "eval:read", "expiry": "30"}, no_new_key),
    "revoke key": Form("/keys/{key}/revoke", "/keys/{key}/revoke", {"confirm": "yes"}, key_not_revoked),
}


@pytest.fixture
async def open_site(settings: Settings) -> AsyncIterator[Site]:
    opened = settings.with_changes(open_signup=True)
    app = create_app(opened, run_worker=False)
    async with app.test_app():
        yield Site(app, opened)


async def prepared(site: Site, name: str) -> tuple[Browser, Form]:
    """A browser in the state each form needs, and the form with the key id filled in."""
    signed_in, _ = await site.signed_in("pat@example.com")
    async with site.db.transaction() as session:
        user = await session.scalar(sa.select(User).where(User.email == "pat@example.com"))
        assert user is not None
        key = await create_api_key(session, user, name="k0", scopes=["eval:read"], secret_key=site.settings.secret_key)
        await create_user(session, "other@example.com")
    form = FORMS[name]
    form = Form(form.page.format(key=key.record.id), form.action.format(key=key.record.id), form.fields, form.unchanged)
    if name in ("signin", "signup"):
        # A visitor who has loaded the form (so holds the pre-session cookie) but is not signed in.
        visitor = site.browser(addr="203.0.113.20")
        return visitor, form
    return signed_in, form


@pytest.mark.parametrize("name", list(FORMS))
@pytest.mark.parametrize(("token", "status"), [(None, 400), ("forged-token", 403), ("", 400)])
async def test_form_without_its_csrf_token_is_refused(
    open_site: Site, name: str, token: str | None, status: int
) -> None:
    browser, form = await prepared(open_site, name)
    page = await browser.get(form.page)
    assert page.status == 200 and page.csrf()
    body = dict(form.fields)
    if token is not None:
        body["csrf_token"] = token
    refused = await browser.post(form.action, body)
    assert refused.status == status, refused.text
    assert "security token" in refused.text
    assert await form.unchanged(open_site)


async def test_a_token_from_another_session_is_refused(site: Site) -> None:
    mallory, _ = await site.signed_in("mallory@example.com")
    victim, _ = await site.signed_in("victim@example.com")
    token = (await mallory.get("/keys/new")).csrf()
    refused = await victim.post("/keys", {"csrf_token": token, "name": "k", "scope": "eval:read"})
    assert refused.status == 403
    assert await _count(site, ApiKey) == 0


async def test_the_signin_token_is_bound_to_the_browser(site: Site) -> None:
    attacker = site.browser(addr="203.0.113.30")
    token = (await attacker.get("/signin")).csrf()
    victim = site.browser()
    await victim.get("/signin")  # the victim has a pre-session cookie of its own
    refused = await victim.post("/signin", {"csrf_token": token, "email": "a@example.com", "password": "x" * 10})
    assert refused.status == 403
