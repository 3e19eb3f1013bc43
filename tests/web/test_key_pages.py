"""The API keys page: create (scopes, expiry, the secret once), the limit, revoke, escaping."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, date, datetime, timedelta

import pytest
import sqlalchemy as sa
from markupsafe import escape

from api.pages import CSP
from core import apikeys
from core.accounts import MAX_ACTIVE_KEYS, create_api_key
from core.models import ApiKey, User, utcnow
from tests.conftest import bearer
from tests.web.browser import Browser, Page
from tests.web.conftest import Site

SECRET = re.compile(r'id="new-key" value="(svc_eval_[0-9A-Za-z]{32})"')
SCOPE_SETS = [list(combo) for n in (1, 2, 3) for combo in itertools.combinations(apikeys.SCOPES, n)]


async def create_key(browser: Browser, **fields: object) -> Page:
    """Submit the new-key form; a made key's POST answers 303, and this follows it to the page showing the key."""
    body: dict[str, object] = {"name": "ci", "scope": ["eval:read"], "expiry": "30"}
    body.update(fields)
    posted = await browser.submit("/keys/new", "/keys", {k: v for k, v in body.items() if v is not None})
    if posted.status != 303:
        return posted
    assert posted.location is not None and re.fullmatch(r"/keys/key_\w+/created", posted.location), posted.location
    return await browser.get(posted.location)


def secret_of(page: Page) -> str:
    found = SECRET.search(page.text)
    assert found, page.text
    return found.group(1)


async def keys_of(site: Site, user_id: str) -> list[ApiKey]:
    async with site.db.reading() as session:
        return list(await session.scalars(sa.select(ApiKey).where(ApiKey.user_id == user_id).order_by(ApiKey.name)))


async def api_status(site: Site, secret: str) -> int:
    """What the REST API says to the key: 404 (unknown execution) once authenticated, else 401/403."""
    response = await site.app.test_client().get("/api/eval/status/exe_nothing", headers=bearer(secret))
    return response.status_code


@pytest.mark.parametrize("scopes", SCOPE_SETS, ids=["+".join(s) for s in SCOPE_SETS])
async def test_create_with_each_scope_combination(site: Site, scopes: list[str]) -> None:
    browser, user_id = await site.signed_in("ann@example.com")
    page = await create_key(browser, name="combo", scope=scopes)
    assert page.status == 200, page.text
    [key] = await keys_of(site, user_id)
    assert key.scopes == sorted(scopes)
    secret = secret_of(page)
    assert await api_status(site, secret) == (404 if "eval:read" in apikeys.effective_scopes(scopes) else 403)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"scope": None}, "Choose at least one scope."),
        ({"scope": ["eval:everything"]}, "Choose scopes from the list."),
        ({"name": "  "}, "Give the key a name"),
        ({"name": "n" * 101}, "Keep the name to 100 characters."),
        ({"description": "d" * 501}, "Keep the description to 500 characters."),
        ({"expiry": "365"}, "Choose when the key expires."),
        ({"expiry": "date", "expires_on": ""}, "Enter the expiry date as YYYY-MM-DD."),
        ({"expiry": "date", "expires_on": "2001-01-01"}, "Choose a date from tomorrow"),
    ],
)
async def test_invalid_form_says_what_to_fix(site: Site, fields: dict[str, object], message: str) -> None:
    browser, user_id = await site.signed_in("ann@example.com")
    page = await create_key(browser, **fields)
    assert page.status == 422 and message in page.text
    assert await keys_of(site, user_id) == []


@pytest.mark.parametrize("days", [7, 30, 60, 90])
async def test_expiry_presets(site: Site, days: int) -> None:
    browser, user_id = await site.signed_in("ann@example.com")
    before = utcnow()
    assert (await create_key(browser, expiry=str(days))).status == 200
    [key] = await keys_of(site, user_id)
    assert key.expires_at is not None
    assert before + timedelta(days=days) <= key.expires_at <= utcnow() + timedelta(days=days)


async def test_expiry_defaults_to_30_days(site: Site) -> None:
    browser, user_id = await site.signed_in("ann@example.com")
    form = await browser.get("/keys/new")
    assert re.search(r'name="expiry" value="30"\s+checked', form.text)
    before = utcnow()
    assert (await create_key(browser, expiry=None)).status == 200
    [key] = await keys_of(site, user_id)
    assert key.expires_at is not None and before + timedelta(days=30) <= key.expires_at <= utcnow() + timedelta(days=30)


async def test_expiry_on_a_date(site: Site) -> None:
    browser, user_id = await site.signed_in("ann@example.com")
    chosen = utcnow().date() + timedelta(days=45)
    assert (await create_key(browser, expiry="date", expires_on=chosen.isoformat())).status == 200
    [key] = await keys_of(site, user_id)
    assert key.expires_at == datetime(chosen.year, chosen.month, chosen.day, tzinfo=UTC)
    too_far = date.today() + timedelta(days=400)
    assert (await create_key(browser, expiry="date", expires_on=too_far.isoformat())).status == 422


async def test_secret_is_shown_exactly_once(site: Site) -> None:
    browser, user_id = await site.signed_in("ann@example.com")
    page = await create_key(browser, name="once")
    secret = secret_of(page)
    assert page.headers["Cache-Control"] == "no-store"
    assert page.text.count(secret) == 1
    [key] = await keys_of(site, user_id)
    # The database holds the HMAC and a hint, nothing from which the secret comes back.
    assert key.digest == apikeys.key_digest(secret, site.settings.secret_key)
    async with site.db.reading() as session:
        row = (await session.execute(sa.select(ApiKey.__table__).where(ApiKey.id == key.id))).one()
    assert all(secret not in str(value) for value in row)
    # Reloading the page after the form (a GET: the form is never posted again) shows the key, not its secret.
    again = await browser.get(f"/keys/{key.id}/created")
    assert again.status == 200 and secret not in again.text and SECRET.search(again.text) is None
    assert "shown once, when it was created, and" in again.text and f"svc_eval_…{secret[-4:]}" in again.text
    assert len(await keys_of(site, user_id)) == 1
    listing = await browser.get("/keys")
    assert listing.status == 200 and "once" in listing.text
    assert secret not in listing.text and secret[9:-4] not in listing.text
    assert f"svc_eval_…{secret[-4:]}" in listing.text
    for path in ("/", "/keys/new", f"/keys/{key.id}/revoke"):
        assert secret not in (await browser.get(path)).text


async def test_the_eleventh_active_key_is_refused(site: Site) -> None:
    browser, user_id = await site.signed_in("ann@example.com")
    async with site.db.transaction() as session:
        user = await session.get_one(User, user_id)
        for n in range(MAX_ACTIVE_KEYS):
            await create_api_key(session, user, name=f"k{n}", scopes=["eval:read"], secret_key=site.settings.secret_key)
    form = await browser.get("/keys/new")
    assert "You already have 10 active keys" in form.text
    refused = await create_key(browser, name="eleventh")
    assert refused.status == 409
    assert "You already have 10 active keys, the most an account may hold. Revoke a key" in refused.text
    assert SECRET.search(refused.text) is None
    assert len(await keys_of(site, user_id)) == MAX_ACTIVE_KEYS
    # An expired or revoked key frees its place.
    async with site.db.transaction() as session:
        await session.execute(sa.update(ApiKey).where(ApiKey.name == "k0").values(revoked_at=utcnow()))
    assert (await create_key(browser, name="eleventh")).status == 200


async def test_revoke_takes_a_confirmation_and_the_key_stops_working(site: Site) -> None:
    browser, user_id = await site.signed_in("ann@example.com")
    secret = secret_of(await create_key(browser, name="to revoke"))
    [key] = await keys_of(site, user_id)
    assert await api_status(site, secret) == 404
    listing = await browser.get("/keys")
    assert f'href="/keys/{key.id}/revoke"' in listing.text
    # A bare POST (no confirmation) only leads to the confirmation page.
    bare = await browser.post(f"/keys/{key.id}/revoke", {"csrf_token": listing.csrf()})
    assert bare.status == 303 and bare.location == f"/keys/{key.id}/revoke"
    assert (await keys_of(site, user_id))[0].revoked_at is None
    confirm = await browser.get(f"/keys/{key.id}/revoke")
    assert (
        confirm.status == 200 and "Revoke “to revoke”?" in confirm.text and 'name="confirm" value="yes"' in confirm.text
    )
    done = await browser.post(f"/keys/{key.id}/revoke", {"csrf_token": confirm.csrf(), "confirm": "yes"})
    assert done.status == 303 and done.location == f"/keys?revoked={key.id}"
    assert await api_status(site, secret) == 401
    after = await browser.get(done.location)
    assert "Key “to revoke” is revoked." in after.text
    assert "Revoked <time" in after.text and f'href="/keys/{key.id}/revoke"' not in after.text


async def test_the_secret_goes_only_to_the_browser_that_made_the_key(site: Site) -> None:
    """The page after the form needs the pad the form's answer gave its browser: the same user in another browser
    (another session, no pad) sees no secret, and the key's sealed half is spent by that visit all the same."""
    browser, user_id = await site.signed_in("ann@example.com")
    posted = await browser.submit("/keys/new", "/keys", {"name": "ci", "scope": ["eval:read"], "expiry": "30"})
    assert posted.status == 303 and posted.location is not None
    elsewhere = site.browser()
    elsewhere.cookies = {name: value for name, value in browser.cookies.items() if "new_key" not in name}
    first = await elsewhere.get(posted.location)
    assert first.status == 200 and SECRET.search(first.text) is None
    assert SECRET.search((await browser.get(posted.location)).text) is None
    [key] = await keys_of(site, user_id)
    assert key.sealed_secret is None


async def test_another_users_key_cannot_be_seen_or_revoked(site: Site) -> None:
    owner, owner_id = await site.signed_in("owner@example.com")
    posted = await owner.submit("/keys/new", "/keys", {"name": "owned", "scope": ["eval:read"], "expiry": "30"})
    assert posted.status == 303 and posted.location is not None
    intruder, _ = await site.signed_in("intruder@example.com")
    # Another's key page is not found, and their visit does not spend the owner's one showing.
    assert (await intruder.get(posted.location)).status == 404
    secret = secret_of(await owner.get(posted.location))
    [key] = await keys_of(site, owner_id)
    assert (await intruder.get(f"/keys/{key.id}/revoke")).status == 404
    token = (await intruder.get("/keys")).csrf()
    assert (await intruder.post(f"/keys/{key.id}/revoke", {"csrf_token": token, "confirm": "yes"})).status == 404
    assert (await intruder.post("/keys/key_unknown/revoke", {"csrf_token": token, "confirm": "yes"})).status == 404
    assert "owned" not in (await intruder.get("/keys")).text
    assert (await keys_of(site, owner_id))[0].revoked_at is None
    assert await api_status(site, secret) == 404


async def test_user_text_is_escaped(site: Site) -> None:
    browser, _ = await site.signed_in("ann@example.com")
    name = "<script>alert(1)</script>"
    description = '"><img src=x onerror=alert(2)>'
    created = await create_key(browser, name=name, description=description)
    listing = await browser.get("/keys")
    for page in (created, listing):
        assert "<script>alert(1)" not in page.text and "<img src=x" not in page.text
    assert escape(name) in listing.text and escape(description) in listing.text
    assert escape(name) in created.text


async def test_pages_carry_security_headers(site: Site) -> None:
    browser, _ = await site.signed_in("ann@example.com")
    for path in ("/", "/keys", "/keys/new", "/signin?next=/keys"):
        page = await browser.get(path)
        assert page.headers["Content-Security-Policy"] == CSP
        assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP and "frame-ancestors 'none'" in CSP
        assert page.headers["X-Content-Type-Options"] == "nosniff"
        assert page.headers["Referrer-Policy"] == "same-origin"
    # No inline script anywhere: scripts come from files only.
    created = await create_key(browser)
    tags = re.findall(r"<script[^>]*>", created.text)
    assert '<script src="/static/js/copy.js" defer>' in tags
    assert all(re.fullmatch(r'<script (type="module" )?src="/[\w./-]+"( defer)?>', tag) for tag in tags), tags
    assert len(re.findall(r"<script[^>]*></script>", created.text)) == len(tags)  # every one empty: no inline code
    assert " style=" not in created.text and "<style" not in created.text
    static = await site.app.test_client().get("/static/js/copy.js")
    assert static.status_code == 200 and "clipboard" in await static.get_data(as_text=True)


async def test_home_page_links_to_sign_in_and_to_keys(site: Site) -> None:
    stranger = await site.browser().get("/")
    assert stranger.status == 200 and 'href="/signin"' in stranger.text
    browser, _ = await site.signed_in("ann@example.com")
    await create_key(browser)
    home = await browser.get("/")
    assert "Signed in as <strong>ann@example.com</strong>" in home.text
    assert "You have 1 of 10 active keys." in home.text and 'href="/keys"' in home.text
