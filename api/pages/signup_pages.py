"""Open sign-up (when the operator turns it on): the form, and the confirmation link mailed to the address.

The account is made only by the confirmation (api/signup.py says why and how).
"""

from __future__ import annotations

import asyncio

from quart import Blueprint, Response, abort, render_template, request
from sqlalchemy.exc import IntegrityError
from werkzeug.datastructures import MultiDict

from api import signin
from api.signup import LinkState, find_request, request_signup, spend
from core.accounts import AccountError, create_user, hash_password, normalise_email, password_matches
from core.models import utcnow
from core.web.services import db_session, services
from core.web.sessions import (
    check_presession_csrf,
    client_addr,
    current_viewer,
    presession_token,
    see_other,
    start_session,
)

blueprint = Blueprint("signup", __name__)

MIN_PASSWORD = 8
# The confirmation page's address carries its token: no Referer may take it elsewhere.
_LINK_HEADERS = {"Referrer-Policy": "no-referrer"}

Page = Response | tuple[str, int] | tuple[str, int, dict[str, str]] | str


def _require_open_signup() -> None:
    # Closed sign-up is not a refusal page but an absent one: nothing to probe.
    if not services().settings.open_signup:
        abort(404)


async def _signup_form(status: int = 200, *, error: str | None = None, email: str = "") -> tuple[str, int]:
    page = await render_template("api/signup.html", csrf_token=presession_token(), error=error, email=email)
    return page, status


@blueprint.get("/signup")
async def signup_page() -> Page:
    _require_open_signup()
    if await current_viewer() is not None:
        return see_other("/keys")
    return await _signup_form()


@blueprint.post("/signup")
async def signup_submit() -> Page:
    _require_open_signup()
    await check_presession_csrf()
    form: MultiDict[str, str] = await request.form
    raw_email = form.get("email", "")
    password = form.get("password", "")
    try:
        email = normalise_email(raw_email)
    except AccountError:
        return await _signup_form(422, error="Enter a valid e-mail address.", email=raw_email)
    if not MIN_PASSWORD <= len(password) <= signin.MAX_PASSWORD:
        return await _signup_form(
            422, error=f"Choose a password of {MIN_PASSWORD} to {signin.MAX_PASSWORD} characters.", email=email
        )
    # Hashed before the write transaction opens, so the write lock is not held through Argon2; hashed for a
    # taken address too, so the answer takes as long.
    password_hash = await asyncio.to_thread(hash_password, password)
    settings = services().settings
    base_url = (settings.base_url or request.host_url).rstrip("/")
    await request_signup(db_session(), settings, base_url, email, password_hash, client_addr())
    # The same page whether or not the address has an account: the mail tells its owner which.
    return await render_template("api/signup_sent.html", email=email, hours=settings.signup_link_hours)


async def _closed(state: LinkState) -> tuple[str, int, dict[str, str]]:
    page = await render_template("api/signup_link_closed.html", state=state)
    return page, 404 if state.status == "unknown" else 410, _LINK_HEADERS


async def _confirm_form(
    state: LinkState, status: int = 200, error: str | None = None
) -> tuple[str, int, dict[str, str]]:
    page = await render_template("api/signup_confirm.html", state=state, csrf_token=presession_token(), error=error)
    return page, status, _LINK_HEADERS


@blueprint.get("/signup/confirm/<token>")
async def confirm_page(token: str) -> Page:
    _require_open_signup()
    # Confirms nothing: mail scanners open links. The form below does.
    state = await find_request(db_session(), services().settings.secret_key, token, utcnow())
    if state.status != "pending":
        return await _closed(state)
    return await _confirm_form(state)


@blueprint.post("/signup/confirm/<token>")
async def confirm_submit(token: str) -> Page:
    _require_open_signup()
    await check_presession_csrf()
    form: MultiDict[str, str] = await request.form
    password = form.get("password", "")
    db = services().db
    async with db.reading() as reader:
        state = await find_request(reader, services().settings.secret_key, token, utcnow())
    if state.status != "pending" or state.request is None:
        return await _closed(state)
    pending = state.request
    # Guesses at the password go through the sign-in throttle of the address (api/signin.py).
    refusal = await signin.reserve_attempt(db, pending.email, client_addr(), utcnow())
    if refusal is not None:
        page, _, headers = await _confirm_form(state, error=refusal.message)
        return page, 429, {**headers, "Retry-After": str(refusal.retry_after)}
    if len(password) > signin.MAX_PASSWORD:
        password = ""
    if not await asyncio.to_thread(password_matches, pending.password_hash, password):
        return await _confirm_form(state, 401, "That is not the password chosen when signing up with this link.")
    session = db_session()
    now = utcnow()
    if not await spend(session, pending, now):
        return await _closed(LinkState("expired" if pending.expires_at <= now else "used", pending))
    try:
        user = await create_user(session, pending.email)
    except (AccountError, IntegrityError):
        # Made meanwhile by another link for the address, or by the operator.
        return await _closed(LinkState("used", pending))
    user.password_hash = pending.password_hash
    await signin.clear_failures(session, pending.email)
    response = see_other("/keys")
    await start_session(session, user, response)
    return response
