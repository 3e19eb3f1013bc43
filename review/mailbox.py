"""The dev mailbox: with no SMTP server configured, mail stays in the outbox, and its recipient reads
it here, as they would in a mail client, with working links.

A signed-in user sees only the messages addressed to their own e-mail. The HTML part is shown in a
sandboxed iframe (srcdoc, no scripts, no same-origin), with `<base target="_top">` so that its links
open in the window itself; the plain-text part is shown beside it as text.
"""

from __future__ import annotations

import sqlalchemy as sa
from quart import Blueprint, Response, abort, render_template

from core.models import MailMessage
from core.web.headers import add_page_headers
from core.web.services import db_session
from core.web.sessions import login_required, viewer

blueprint = Blueprint("mailbox", __name__)

PAGE_SIZE = 100
# The mail's own links leave through the top window; nothing in it runs (no allow-scripts). Mail is styled inline
# (what mail clients read), and the message's frame inherits this policy: inline styles are allowed here, scripts
# are not, and nothing may load from elsewhere (img-src), so a style cannot carry anything off.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "object-src 'none'; "
    "frame-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


@blueprint.after_request
async def security_headers(response: Response) -> Response:
    # Messages hold single-use review links: no Referer carries them off, no cache keeps them.
    return add_page_headers(response, csp=CSP, referrer_policy="no-referrer")


def _mine() -> sa.ColumnElement[bool]:
    return sa.func.lower(MailMessage.recipient) == viewer().email.lower()


@blueprint.get("/mailbox")
@login_required
async def inbox() -> str:
    rows = await db_session().scalars(
        sa.select(MailMessage).where(_mine()).order_by(MailMessage.created_at.desc(), MailMessage.id).limit(PAGE_SIZE)
    )
    return await render_template("review/mailbox.html", viewer=viewer(), messages=list(rows))


@blueprint.get("/mailbox/<message_id>")
@login_required
async def message(message_id: str) -> str:
    if len(message_id) > 64:
        abort(404)
    found = await db_session().scalar(sa.select(MailMessage).where(MailMessage.id == message_id, _mine()))
    if found is None:
        abort(404)  # another's message looks like no message
    srcdoc = '<base target="_top">' + found.html_body if found.html_body else None
    return await render_template("review/mail_message.html", viewer=viewer(), message=found, srcdoc=srcdoc)
