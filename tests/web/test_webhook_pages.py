"""The account's webhook page: the secret only in answer to a POST with the CSRF token, rotation after a
confirmation, and the rotation's effect on signing."""

from __future__ import annotations

import re

from core.webhook_secrets import derive_secret, signing_secrets
from tests.web.conftest import Site

SECRET = re.compile(r'id="webhook-secret" value="(whsec_[A-Za-z0-9+/=]{44})"')


async def test_the_secret_is_shown_on_request_only(site: Site) -> None:
    browser, user_id = await site.signed_in("ann@example.com")
    home = await browser.get("/")
    assert 'href="/webhooks"' in home.text
    page = await browser.get("/webhooks")
    assert page.status == 200 and "whsec_" not in page.text  # not on a plain GET
    assert page.headers["Cache-Control"].startswith("no-store")
    shown = await browser.post("/webhooks/secret", {"csrf_token": page.csrf()})
    assert shown.status == 200, shown.text
    found = SECRET.search(shown.text)
    assert found and found.group(1) == derive_secret(site.settings.secret_key, user_id, 1)
    refused = await browser.post("/webhooks/secret", {"csrf_token": "forged"})
    assert refused.status == 403 and "whsec_" not in refused.text


async def test_rotation_needs_the_confirmation_and_the_token(site: Site) -> None:
    browser, user_id = await site.signed_in("ann@example.com")
    confirm = await browser.get("/webhooks/rotate")
    assert confirm.status == 200 and 'name="confirm" value="yes"' in confirm.text
    unconfirmed = await browser.post("/webhooks/rotate", {"csrf_token": confirm.csrf()})
    assert unconfirmed.status == 303 and unconfirmed.location == "/webhooks/rotate"
    forged = await browser.post("/webhooks/rotate", {"csrf_token": "forged", "confirm": "yes"})
    assert forged.status == 403
    async with site.db.reading() as session:
        assert (await signing_secrets(session, site.settings.secret_key, user_id)).generation == 1

    rotated = await browser.post("/webhooks/rotate", {"csrf_token": confirm.csrf(), "confirm": "yes"})
    assert rotated.status == 200, rotated.text
    found = SECRET.search(rotated.text)
    assert found and found.group(1) == derive_secret(site.settings.secret_key, user_id, 2)
    assert "New secret made." in rotated.text and "keeps signing too" in rotated.text
    async with site.db.reading() as session:
        secrets = await signing_secrets(session, site.settings.secret_key, user_id)
    assert secrets.signing == (
        derive_secret(site.settings.secret_key, user_id, 2),
        derive_secret(site.settings.secret_key, user_id, 1),
    )


async def test_signed_out_visitors_are_sent_to_sign_in(site: Site) -> None:
    # 303 See Other (core/web/sessions.py's login_required), back to the very page asked for after sign-in.
    page = await site.browser().get("/webhooks")
    assert (page.status, page.location) == (303, "/signin?next=%2Fwebhooks")
    deeper = await site.browser().get("/webhooks/rotate")
    assert (deeper.status, deeper.location) == (303, "/signin?next=%2Fwebhooks%2Frotate")
