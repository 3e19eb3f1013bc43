"""The API keys page: list with usage, create (the secret shown once), revoke after a confirmation."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from quart import Blueprint, Response, abort, render_template, request
from werkzeug.datastructures import MultiDict

from api.pages.key_form import DEFAULT_EXPIRY, EXPIRY_PRESETS, ON_DATE, SCOPE_HELP, KeyForm
from api.pages.key_reveal import seal, unseal
from api.usage import usage_by_day
from core.accounts import (
    MAX_ACTIVE_KEYS,
    MAX_KEY_DAYS,
    AccountError,
    active_key_count,
    create_api_key,
    key_state,
    list_api_keys,
    revoke_api_key,
)
from core.apikeys import SCOPES
from core.models import ApiKey, User, utcnow
from core.web.services import db_session, services
from core.web.sessions import login_required, see_other, viewer

blueprint = Blueprint("keys", __name__)

Page = Response | tuple[str, int] | str


@dataclass(frozen=True)
class KeyRow:
    """One key as the list shows it."""

    key: ApiKey
    state: str
    daily: list[tuple[str, int]]

    @property
    def last_30_days(self) -> int:
        return sum(count for _, count in self.daily)

    @property
    def busiest_day(self) -> int:
        return max((count for _, count in self.daily), default=0)


def _limit_message() -> str:
    return (
        f"You already have {MAX_ACTIVE_KEYS} active keys, the most an account may hold. "
        "Revoke a key you no longer use, then create the new one."
    )


@blueprint.get("/keys")
@login_required
async def list_keys() -> str:
    session = db_session()
    user = await session.get_one(User, viewer().user_id)
    now = utcnow()
    keys = await list_api_keys(session, user)
    usage = await usage_by_day(session, [key.id for key in keys], now)
    rows = [KeyRow(key, key_state(key, now), list(usage[key.id].items())) for key in keys]
    revoked_id = request.args.get("revoked")
    return await render_template(
        "api/keys.html",
        active=[row for row in rows if row.state == "active"],
        inactive=[row for row in rows if row.state != "active"],
        revoked=next((row.key for row in rows if row.key.id == revoked_id), None),
        max_keys=MAX_ACTIVE_KEYS,
        now=now,
    )


async def _new_key_form(form: KeyForm, status: int = 200, *, problem: str | None = None) -> tuple[str, int]:
    now = utcnow()
    at_limit = await active_key_count(db_session(), viewer().user_id, now) >= MAX_ACTIVE_KEYS
    page = await render_template(
        "api/key_new.html",
        form=form,
        problem=problem or (_limit_message() if at_limit else None),
        scopes=[(scope, SCOPE_HELP[scope]) for scope in SCOPES],
        presets=EXPIRY_PRESETS,
        default_expiry=DEFAULT_EXPIRY,
        on_date=ON_DATE,
        date_range=_date_range(now),
    )
    return page, status


def _date_range(now: datetime) -> tuple[str, str]:
    today = now.date()
    return (today + timedelta(days=1)).isoformat(), (today + timedelta(days=MAX_KEY_DAYS)).isoformat()


@blueprint.get("/keys/new")
@login_required
async def new_key() -> Page:
    return await _new_key_form(KeyForm())


@blueprint.post("/keys")
@login_required
async def create_key() -> Page:
    form = KeyForm.parse(await request.form, utcnow())
    if not form.ok:
        return await _new_key_form(form, 422)
    session = db_session()
    user = await session.get_one(User, viewer().user_id)
    if await active_key_count(session, user.id, utcnow()) >= MAX_ACTIVE_KEYS:
        return await _new_key_form(form, 409, problem=_limit_message())
    try:
        made = await create_api_key(
            session,
            user,
            name=form.name,
            description=form.description,
            scopes=form.scopes,
            secret_key=services().settings.secret_key,
            expires_at=form.expires_at,
        )
    except AccountError as exc:
        # A race with another tab past the limit check above, or a rule only the core knows.
        return await _new_key_form(form, 409, problem=str(exc).capitalize())
    # Redirected, so a reload never posts again; the secret goes to the next page sealed (key_reveal.py).
    response = see_other(f"/keys/{made.record.id}/created")
    seal(made.record, made.secret, response)
    return response


@blueprint.get("/keys/<key_id>/created")
@login_required
async def key_created(key_id: str) -> Response:
    key = await _own_key(key_id)
    response = Response("", mimetype="text/html")
    secret = await unseal(key, response)
    response.set_data(await render_template("api/key_created.html", key=key, secret=secret))
    return response


async def _own_key(key_id: str) -> ApiKey:
    """The signed-in user's key; anyone else's is as absent as a key that never existed."""
    key = await db_session().get(ApiKey, key_id)
    if key is None or key.user_id != viewer().user_id:
        abort(404)
    return key


@blueprint.get("/keys/<key_id>/revoke")
@login_required
async def confirm_revoke(key_id: str) -> Page:
    key = await _own_key(key_id)
    return await render_template("api/key_revoke.html", key=key, state=key_state(key, utcnow()))


@blueprint.post("/keys/<key_id>/revoke")
@login_required
async def revoke_key(key_id: str) -> Page:
    key = await _own_key(key_id)
    form: MultiDict[str, str] = await request.form
    if form.get("confirm") != "yes":
        # Only the confirmation page's form says yes; anything else goes there first.
        return see_other(f"/keys/{key.id}/revoke")
    await revoke_api_key(db_session(), key.id, viewer().user_id)
    return see_other(f"/keys?revoked={key.id}")
