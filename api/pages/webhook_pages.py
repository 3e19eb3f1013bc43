"""The account's webhook page: the signing secret, shown on request, and its rotation after a confirmation.

The secret is derived from the server key (core/webhook_secrets.py), so it can be shown again at any time;
it is still only rendered in answer to a POST (with the CSRF token), never on a plain GET, so that a page
left open, a prefetch or the browser history does not hold it.
"""

from __future__ import annotations

from quart import Blueprint, Response, render_template, request
from werkzeug.datastructures import MultiDict

from core.web.services import db_session, services
from core.web.sessions import login_required, see_other, viewer
from core.webhook_secrets import ROTATION_OVERLAP, rotate_secret, signing_secrets

blueprint = Blueprint("webhook_pages", __name__)

Page = Response | tuple[str, int] | str
_OVERLAP_HOURS = int(ROTATION_OVERLAP.total_seconds() // 3600)


async def _page(*, reveal: bool, rotated: bool = False) -> str:
    secrets = await signing_secrets(db_session(), services().settings.secret_key, viewer().user_id)
    return await render_template(
        "api/webhooks.html",
        secret=secrets.current if reveal else None,
        generation=secrets.generation,
        previous_retires_at=secrets.previous_retires_at,
        rotated=rotated,
        overlap_hours=_OVERLAP_HOURS,
    )


@blueprint.get("/webhooks")
@login_required
async def webhook_page() -> Page:
    return await _page(reveal=False)


@blueprint.post("/webhooks/secret")
@login_required
async def reveal_secret() -> Page:
    return await _page(reveal=True)


@blueprint.get("/webhooks/rotate")
@login_required
async def confirm_rotate() -> Page:
    return await render_template("api/webhooks_rotate.html", overlap_hours=_OVERLAP_HOURS)


@blueprint.post("/webhooks/rotate")
@login_required
async def rotate() -> Page:
    form: MultiDict[str, str] = await request.form
    if form.get("confirm") != "yes":
        # Only the confirmation page's form says yes; anything else goes there first.
        return see_other("/webhooks/rotate")
    await rotate_secret(db_session(), services().settings.secret_key, viewer().user_id)
    return await _page(reveal=True, rotated=True)
