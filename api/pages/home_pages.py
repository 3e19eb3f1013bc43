"""The landing page: what Vouch is and where to sign in; once signed in, a small account home."""

from __future__ import annotations

from quart import Blueprint, render_template

from core.accounts import MAX_ACTIVE_KEYS, active_key_count
from core.models import utcnow
from core.web.services import db_session, services
from core.web.sessions import current_viewer

blueprint = Blueprint("home", __name__)


@blueprint.get("/")
async def home() -> str:
    viewer = await current_viewer()
    active = await active_key_count(db_session(), viewer.user_id, utcnow()) if viewer is not None else None
    return await render_template(
        "api/home.html",
        active_keys=active,
        max_keys=MAX_ACTIVE_KEYS,
        open_signup=services().settings.open_signup,
    )
