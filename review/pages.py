"""The pages a review mail's links open: a confirmation page (GET changes nothing: mail scanners
fetch links) whose POST decides, and a clear page for a link that can no longer decide.

The reviewer is not signed in here. The form's CSRF token is an HMAC of a random pre-session cookie
and the link's id: bound to this browser and this link, so another site cannot post it for them.
"""

from __future__ import annotations

import hmac
from typing import Any

from quart import Blueprint, Response, render_template, request

from core.links import chat_url
from core.models import ReviewLink
from core.tool_args import argument_lines
from core.vocabulary import CheckpointOrigin
from core.web.headers import add_page_headers
from core.web.services import services
from core.web.sessions import PRESESSION_COOKIE, client_addr, presession_secret, read_cookie, token_digest
from review.by_mail import LinkRefused, LinkState, decide_by_link, link_state
from review.decision_errors import InvalidInput
from review.decision_input import checked_grade
from review.decisions import Verdict
from review.links import find_link
from review.notify import base_url

blueprint = Blueprint("review", __name__)

MAX_COMMENT = 10_000


@blueprint.after_request
async def security_headers(response: Response) -> Response:
    # The address holds the link's token: no Referer may carry it to another site, no cache keep it.
    return add_page_headers(response, referrer_policy="no-referrer")


def _csrf_for(link: ReviewLink) -> str:
    return token_digest(services().settings.secret_key, "review-link-csrf", f"{presession_secret()}:{link.id}")


def _csrf_ok(link: ReviewLink, sent: str | None) -> bool:
    raw = read_cookie(PRESESSION_COOKIE)
    if not sent or not raw or len(raw) > 100:
        return False
    expected = token_digest(services().settings.secret_key, "review-link-csrf", f"{raw}:{link.id}")
    return hmac.compare_digest(sent.encode(), expected.encode())


def _chat_url(state: LinkState) -> str:
    # The view link only: a page reached through a link, usable or spent, hands out nothing that decides.
    settings = services().settings
    return chat_url(base_url(settings), settings.secret_key, state.execution.id)


async def _closed_page(state: LinkState, status: int, note: str = "") -> tuple[str, int]:
    page = await render_template("review/link_closed.html", state=state, chat_url=_chat_url(state), note=note)
    return page, status


async def _form_page(
    state: LinkState, *, error: str = "", comment: str = "", status: int = 200, grade: dict[str, str] | None = None
) -> tuple[str, int]:
    context: dict[str, Any] = {
        # The `human` scorer's "Grade the result" (issue 23): approve is a pass, reject a fail.
        "grading": state.checkpoint.origin == CheckpointOrigin.GRADE,
        "rating": (grade or {}).get("rating", ""),
        "labels": (grade or {}).get("labels", ""),
        "state": state,
        "verdict": state.link.purpose,
        "csrf": _csrf_for(state.link),
        "chat_url": _chat_url(state),
        "error": error,
        "comment": comment,
        "action": state.checkpoint.next_action,
        "arguments": argument_lines((state.checkpoint.next_action or {}).get("args") or {}),
        # Links approve or reject as proposed; changing the arguments first is the inbox page's (signed in).
        "inbox_url": f"{base_url(services().settings)}/review/inbox/{state.checkpoint.id}",
    }
    return await render_template("review/link_confirm.html", **context), status


async def _unknown() -> tuple[str, int]:
    page = await render_template(
        "api/error.html",
        title="Unknown review link",
        message="This review link is not valid. Use the newest review mail, or ask the task's owner for the chat link.",
    )
    return page, 404


@blueprint.get("/review/link/<token>")
async def confirm(token: str) -> tuple[str, int]:
    async with services().db.reading() as session:
        link = await find_link(session, services().settings.secret_key, token)
        if link is None or link.purpose not in ("approve", "reject"):
            return await _unknown()
        state = await link_state(session, link)
    if state.status != "usable":
        return await _closed_page(state, 410)
    return await _form_page(state)


@blueprint.post("/review/link/<token>")
async def decide_here(token: str) -> tuple[str, int]:
    form = await request.form
    db = services().db
    async with db.reading() as session:
        link = await find_link(session, services().settings.secret_key, token)
        if link is None or link.purpose not in ("approve", "reject"):
            return await _unknown()
        state = await link_state(session, link)
    if not _csrf_ok(link, form.get("csrf_token")):
        page = await render_template(
            "api/error.html",
            title="Form expired",
            message="This form's security token is not valid. Open the link from the mail again and retry.",
        )
        return page, 403
    if state.status != "usable":
        return await _closed_page(state, 410)
    comment = (form.get("comment") or "").strip()[:MAX_COMMENT]
    sent = {"rating": form.get("rating") or "", "labels": (form.get("labels") or "")[:2000]}
    grading = state.checkpoint.origin == CheckpointOrigin.GRADE
    if link.purpose == "reject" and not comment and not grading:
        return await _form_page(state, error="Say why you reject: the agent gets your comment.", status=422, grade=sent)
    try:
        rating, labels = checked_grade(sent["rating"], sent["labels"])
    except InvalidInput as exc:
        return await _form_page(
            state, error=f"The {exc.pointer.lstrip('/')} {exc.detail}.", comment=comment, status=422, grade=sent
        )
    try:
        async with db.transaction() as session:
            fresh = await session.get_one(ReviewLink, link.id)
            verdict: Verdict = "approve" if link.purpose == "approve" else "reject"
            await decide_by_link(
                session, fresh, verdict, comment=comment, remote_addr=client_addr(), rating=rating, labels=labels
            )
    except LinkRefused as refused:
        async with db.reading() as session:
            latest = await link_state(session, refused.state.link)
        return await _closed_page(latest, 409, note=str(refused) if latest.status == "usable" else "")
    async with db.reading() as session:
        done = await link_state(session, link)
    return await _closed_page(done, 200)
