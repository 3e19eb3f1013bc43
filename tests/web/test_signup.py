"""Open sign-up: absent unless the operator turns it on (VOUCH_OPEN_SIGNUP=1), and then the account exists
only once the address is proven by the single-use, expiring link mailed to it (through the outbox: the dev
mailbox here, as no SMTP server is configured)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from api.app import create_app
from api.signin import BAD_CREDENTIALS
from core.accounts import create_user
from core.models import MailMessage, SignupRequest, User, utcnow
from core.settings import Settings, load_settings
from core.web.sessions import SESSION_COOKIE
from tests.web.browser import Browser, Page
from tests.web.conftest import Site

PASSWORD = "long enough pw"
_LINK = re.compile(r"https://vouch\.test(/signup/confirm/[A-Za-z0-9_-]+)")


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
    assert load_settings(base).signup_link_hours == 24.0
    assert load_settings({**base, "VOUCH_SIGNUP_LINK_HOURS": "2"}).signup_link_hours == 2.0


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


async def sign_up(site: Site, email: str, password: str = PASSWORD, *, addr: str = "198.51.100.7") -> Page:
    return await site.browser(addr=addr).submit("/signup", "/signup", {"email": email, "password": password})


async def sign_in(site: Site, email: str, password: str) -> Page:
    return await site.browser().submit("/signin", "/signin", {"email": email, "password": password})


async def mails_to(site: Site, recipient: str) -> list[MailMessage]:
    async with site.db.reading() as session:
        rows = await session.scalars(
            sa.select(MailMessage).where(MailMessage.recipient == recipient).order_by(MailMessage.created_at)
        )
        return list(rows)


async def link_in_latest_mail(site: Site, recipient: str) -> str:
    mail = (await mails_to(site, recipient))[-1]
    assert mail.status == "dev_mailbox"
    found = _LINK.search(mail.text_body)
    assert found, mail.text_body
    return found.group(1)


async def user_count(site: Site, email: str) -> int:
    async with site.db.reading() as session:
        return int(await session.scalar(sa.select(sa.func.count()).select_from(User).where(User.email == email)) or 0)


async def confirm(browser: Browser, link: str, password: str) -> Page:
    """Post the link's form with the browser's pre-session CSRF token (the form itself is absent once the link
    is dead, but a page kept open from before can still be sent)."""
    token = (await browser.get("/signin")).csrf()
    return await browser.post(link, {"csrf_token": token, "password": password})


async def test_sign_up_makes_no_account_until_the_mailed_link_is_confirmed(open_site: Site) -> None:
    assert "/signup" in (await open_site.browser().get("/signin")).text
    made = await sign_up(open_site, "New@Example.com")
    assert made.status == 200 and "Check your mail" in made.text and "new@example.com" in made.text
    assert SESSION_COOKIE not in " ".join(made.set_cookies())
    # Nothing to sign in to, so nothing to see: no session, inbox, mailbox or keys.
    assert await user_count(open_site, "new@example.com") == 0
    refused = await sign_in(open_site, "new@example.com", PASSWORD)
    assert refused.status == 401 and BAD_CREDENTIALS in refused.text
    for page in ("/keys", "/mailbox", "/review/inbox"):
        bounced = await open_site.browser().get(page)
        assert bounced.status == 303 and (bounced.location or "").startswith("/signin"), page

    link = await link_in_latest_mail(open_site, "new@example.com")
    browser = open_site.browser()
    # Opening the link (as a mail scanner does) confirms nothing: it shows the form that does.
    shown = await browser.get(link)
    assert shown.status == 200 and "new@example.com" in shown.text and 'method="post"' in shown.text
    assert shown.headers["Referrer-Policy"] == "no-referrer" and shown.headers["Cache-Control"] == "no-store"
    assert await user_count(open_site, "new@example.com") == 0
    # Like every form here, the confirmation needs its CSRF token.
    forged = await browser.post(link, {"password": PASSWORD})
    assert forged.status == 400 and await user_count(open_site, "new@example.com") == 0
    # The password chosen at sign-up goes with the link: a mailbox owner who never signed up cannot be
    # made to confirm someone else's account with one click.
    wrong = await confirm(browser, link, "not the password")
    assert wrong.status == 401 and await user_count(open_site, "new@example.com") == 0

    confirmed = await confirm(browser, link, PASSWORD)
    assert confirmed.status == 303 and confirmed.location == "/keys"
    keys = await browser.get("/keys")
    assert keys.status == 200 and "new@example.com" in keys.text
    assert (await browser.get("/mailbox")).status == 200
    assert (await sign_in(open_site, "new@example.com", PASSWORD)).status == 303
    async with open_site.db.reading() as session:
        user = await session.scalar(sa.select(User).where(User.email == "new@example.com"))
    assert user is not None and user.password_hash is not None and user.password_hash.startswith("$argon2id$")

    # Single use: the link is dead now, on GET and POST alike.
    again = open_site.browser()
    used = await again.get(link)
    assert used.status == 410 and "already been used" in used.text
    token = (await again.get("/signin")).csrf()  # the browser's pre-session token, good for any form
    assert (await again.post(link, {"csrf_token": token, "password": PASSWORD})).status == 410


async def test_the_token_is_stored_only_as_an_hmac(open_site: Site) -> None:
    await sign_up(open_site, "new@example.com")
    token = (await link_in_latest_mail(open_site, "new@example.com")).rsplit("/", 1)[1]
    async with open_site.db.reading() as session:
        [request] = list(await session.scalars(sa.select(SignupRequest)))
    assert token not in request.token_digest and len(request.token_digest) == 64
    assert request.expires_at == request.created_at + timedelta(hours=open_site.settings.signup_link_hours)


async def test_the_link_expires(open_site: Site) -> None:
    await sign_up(open_site, "late@example.com")
    link = await link_in_latest_mail(open_site, "late@example.com")
    browser = open_site.browser()
    form = await browser.get(link)
    assert form.status == 200
    async with open_site.db.transaction() as session:
        await session.execute(sa.update(SignupRequest).values(expires_at=utcnow() - timedelta(seconds=1)))
    assert "has expired" in (await browser.get(link)).text
    late = await browser.post(link, {"csrf_token": form.csrf(), "password": PASSWORD})
    assert late.status == 410 and "has expired" in late.text
    assert await user_count(open_site, "late@example.com") == 0


async def test_an_unknown_link_is_not_found(open_site: Site) -> None:
    page = await open_site.browser().get("/signup/confirm/" + "x" * 43)
    assert page.status == 404


async def test_signing_up_with_a_taken_address_reveals_nothing_and_changes_nothing(open_site: Site) -> None:
    async with open_site.db.transaction() as session:
        await create_user(session, "taken@example.com", "the owner's password")
    taken = await sign_up(open_site, "taken@example.com", "an intruder's password")
    fresh = await sign_up(open_site, "fresh@example.com", "an intruder's password")
    # The same answer as for a new address; only the address's owner learns more, by mail.
    assert taken.status == fresh.status == 200
    assert taken.text.replace("taken@example.com", "E") == fresh.text.replace("fresh@example.com", "E")
    [mail] = await mails_to(open_site, "taken@example.com")
    assert "already has an account" in mail.text_body and not _LINK.search(mail.text_body)
    assert (await sign_in(open_site, "taken@example.com", "the owner's password")).status == 303
    assert (await sign_in(open_site, "taken@example.com", "an intruder's password")).status == 401


async def test_a_second_sign_up_cannot_take_over_the_first(open_site: Site) -> None:
    await sign_up(open_site, "owner@example.com", "the owner's password")
    owners_link = await link_in_latest_mail(open_site, "owner@example.com")
    await sign_up(open_site, "owner@example.com", "an intruder's password", addr="203.0.113.66")
    intruders_link = await link_in_latest_mail(open_site, "owner@example.com")
    assert intruders_link != owners_link
    # Each link confirms only its own sign-up's password.
    assert (await confirm(open_site.browser(), owners_link, "an intruder's password")).status == 401
    assert (await confirm(open_site.browser(), owners_link, "the owner's password")).status == 303
    # The account exists now: the other sign-up's link is dead, whoever holds it.
    late = await confirm(open_site.browser(), intruders_link, "an intruder's password")
    assert late.status == 410 and await user_count(open_site, "owner@example.com") == 1
    assert (await sign_in(open_site, "owner@example.com", "the owner's password")).status == 303
    assert (await sign_in(open_site, "owner@example.com", "an intruder's password")).status == 401


async def test_the_dev_mailbox_shows_an_address_its_mail_only_once_it_is_proven(open_site: Site) -> None:
    # Review mail for an address that has no account yet: signing up as it shows nothing until confirmed.
    async with open_site.db.transaction() as session:
        session.add(
            MailMessage(
                id="msg_review1",
                message_key="review:x",
                sender="Vouch <vouch@localhost>",
                recipient="reviewer@example.com",
                subject="Review needed: secret task",
                text_body="approve at …",
                status="dev_mailbox",
                attempts=0,
                created_at=utcnow(),
            )
        )
    made = await sign_up(open_site, "reviewer@example.com")
    assert "secret task" not in made.text
    browser = open_site.browser()
    assert (await browser.get("/mailbox/msg_review1")).status == 303
    link = await link_in_latest_mail(open_site, "reviewer@example.com")
    assert (await confirm(browser, link, PASSWORD)).status == 303
    assert "secret task" in (await browser.get("/mailbox")).text


async def test_sign_up_mail_to_one_address_is_capped(open_site: Site) -> None:
    answers = [await sign_up(open_site, "target@example.com") for _ in range(5)]
    assert {page.status for page in answers} == {200}
    assert len(await mails_to(open_site, "target@example.com")) == 3
