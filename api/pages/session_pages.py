"""Sign-in and sign-out (sign-up is in signup_pages.py)."""

from __future__ import annotations

from quart import Blueprint, Response, render_template, request
from werkzeug.datastructures import MultiDict

from api import signin
from core.models import User, utcnow
from core.web.services import db_session, services
from core.web.sessions import (
    check_presession_csrf,
    client_addr,
    current_viewer,
    end_session,
    login_required,
    presession_token,
    safe_next,
    see_other,
    start_session,
)

blueprint = Blueprint("session", __name__)

Page = Response | tuple[str, int] | tuple[str, int, dict[str, str]] | str


async def _signin_form(
    status: int = 200, *, error: str | None = None, email: str = "", next_path: str = ""
) -> tuple[str, int]:
    page = await render_template(
        "api/signin.html",
        csrf_token=presession_token(),
        error=error,
        email=email,
        next_path=next_path,
        open_signup=services().settings.open_signup,
        signed_out=request.args.get("signed_out") == "1",
    )
    return page, status


@blueprint.get("/signin")
async def signin_page() -> Page:
    next_path = safe_next(request.args.get("next"))
    if await current_viewer() is not None:
        return see_other(next_path)
    return await _signin_form(next_path=next_path)


@blueprint.post("/signin")
async def signin_submit() -> Page:
    await check_presession_csrf()
    form: MultiDict[str, str] = await request.form
    email = signin.email_key(form.get("email", ""))
    password = form.get("password", "")
    next_path = safe_next(form.get("next"))
    addr = client_addr()
    db = services().db
    # The try is counted (and committed) before its password is checked: see api/signin.py.
    refusal = await signin.reserve_attempt(db, email, addr, utcnow())
    if refusal is not None:
        page, _ = await _signin_form(error=refusal.message, email=email, next_path=next_path)
        return page, 429, {"Retry-After": str(refusal.retry_after)}
    # Read-only: a write transaction would hold SQLite's write lock through Argon2 (see check_credentials).
    async with db.reading() as reader:
        user_id = await signin.check_credentials(reader, email, password)
    if user_id is None:
        # The reservation stays, as this failure.
        return await _signin_form(401, error=signin.BAD_CREDENTIALS, email=email, next_path=next_path)
    session = db_session()
    user = await session.get_one(User, user_id)
    await signin.clear_failures(session, email)
    await signin.upgrade_hash(session, user, password)
    response = see_other(next_path)
    await start_session(session, user, response)
    return response


@blueprint.post("/signout")
@login_required
async def signout() -> Response:
    response = see_other("/signin?signed_out=1")
    await end_session(db_session(), response)
    return response
