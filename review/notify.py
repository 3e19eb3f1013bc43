"""The review mail: sent when a checkpoint starts awaiting review, in the transaction that pauses the run.

The message key is (checkpoint, attempt, reviewer): a pause that is replayed after a crash, or a second
call, finds the message already there and mints no second set of links. Links point at VOUCH_BASE_URL, else at
the address `vouch serve` listens on (its worker shares the process); a `vouch worker` has no request to learn the
public address from, so without VOUCH_BASE_URL it falls back to http://127.0.0.1:8000 (`vouch serve`'s default).
"""

from __future__ import annotations

from email.utils import parseaddr
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from jinja2 import Environment, FileSystemLoader, select_autoescape
from sqlalchemy.ext.asyncio import AsyncSession

from core.headers import one_line
from core.links import reviewer_chat_url
from core.mail import enqueue_mail
from core.models import Checkpoint, Execution, MailMessage
from core.settings import Settings
from core.tool_args import argument_lines
from core.vocabulary import CheckpointOrigin
from review.links import mint_links

FALLBACK_BASE_URL = "http://127.0.0.1:8000"
_TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "review" / "mail"
# A template environment of its own: the worker renders mail without a Quart app. HTML autoescaped.
_env = Environment(
    loader=FileSystemLoader(str(_TEMPLATES)),
    autoescape=select_autoescape(enabled_extensions=("html",), default_for_string=False),
    keep_trailing_newline=True,
)
# A multi-line argument in the text mail: every line indented under its name, none cut.
_env.filters["indented"] = lambda text: "\n".join("    " + line for line in str(text).split("\n"))


def review_mail_bodies(context: dict[str, Any]) -> tuple[str, str]:
    """The review mail's text and HTML bodies for `context` (as `queue_review_mail` makes it)."""
    return _env.get_template("checkpoint.txt").render(context), _env.get_template("checkpoint.html").render(context)


def base_url(settings: Settings) -> str:
    return (settings.public_base_url() or FALLBACK_BASE_URL).rstrip("/")


def reply_address(settings: Settings, token: str) -> str:
    """review+<token>@<the domain of VOUCH_MAIL_FROM>: where replies to the review mail go."""
    domain = parseaddr(settings.mail_from)[1].rpartition("@")[2] or "localhost"
    return f"review+{token}@{domain}"


def subject_tag(token: str) -> str:
    return f"[vouch:{token}]"


def message_key(checkpoint: Checkpoint, reviewer: str) -> str:
    return f"review:{checkpoint.id}:{checkpoint.attempt}:{reviewer}"


async def checkpoint_awaiting(
    session: AsyncSession,
    settings: Settings,
    execution_id: str,
    checkpoint: Checkpoint,
    next_action: dict[str, Any] | None,
) -> MailMessage | None:
    """Queue the review mail for this attempt of `checkpoint`; None when the run has no reviewer."""
    execution = await session.get_one(Execution, execution_id)
    reviewer = execution.assigned_reviewer
    if not reviewer:
        return None
    key = message_key(checkpoint, reviewer)
    existing = await session.scalar(sa.select(MailMessage).where(MailMessage.message_key == key))
    if existing is not None:
        return existing
    return await queue_review_mail(session, settings, execution, checkpoint, reviewer, next_action, key=key)


async def queue_review_mail(
    session: AsyncSession,
    settings: Settings,
    execution: Execution,
    checkpoint: Checkpoint,
    reviewer: str,
    next_action: dict[str, Any] | None,
    *,
    key: str,
) -> MailMessage:
    """Mint this attempt's links for `reviewer` and queue their mail under `key`, in the caller's transaction."""
    links = await mint_links(session, settings.secret_key, checkpoint, reviewer, settings.review_link_hours)
    base = base_url(settings)
    # The action on record for this pause (review.pausing writes it on the row) is the one the mail shows.
    next_action = checkpoint.next_action or next_action or {"tool": "finish", "instruction": "finish the task"}
    # Replies are read only where the inbound listener runs (VOUCH_INBOUND_SMTP): without it the mail offers
    # none, and carries no reply token in its subject (core.mail makes a Reply-To from that token).
    replies = settings.inbound_smtp is not None
    context = {
        "execution": execution,
        "checkpoint": checkpoint,
        "next_action": next_action,
        "chat_url": reviewer_chat_url(base, settings.secret_key, execution.id, links.chat),
        "approve_url": f"{base}/review/link/{links.approve}",
        "reject_url": f"{base}/review/link/{links.reject}",
        "reply_token": links.reply,
        "hours": settings.review_link_hours,
        # Every argument in full (issue 20): the mail is the one place some reviewers ever look.
        "arguments": argument_lines(next_action.get("args") or {}),
        "inbox_url": f"{base}/review/inbox/{checkpoint.id}",
        "reads_comments": execution.reads_comments,
        "replies": replies,
        "grading": checkpoint.origin == CheckpointOrigin.GRADE,
    }
    # one_line: names the API took before it refused control characters (issue 19) must not break the header.
    name, stage = one_line(execution.task_name), one_line(checkpoint.stage)
    tag = f" {subject_tag(links.reply)}" if replies else ""
    subject = f"Review needed: {name} — {stage}{tag}"
    if checkpoint.origin == CheckpointOrigin.GRADE:
        subject = f"Grade the result: {name}{tag}"
    elif checkpoint.attempt > 1:
        subject = f"Review needed (attempt {checkpoint.attempt}): {name} — {stage}{tag}"
    text_body, html_body = review_mail_bodies(context)
    return await enqueue_mail(
        session,
        message_key=key,
        sender=settings.mail_from,
        recipient=reviewer,
        subject=subject,
        text_body=text_body,
        html_body=html_body,
        execution_id=execution.id,
        # core.mail.to_email turns the subject's [vouch:<token>] into the Reply-To address (reply_address).
        smtp_configured=settings.smtp_url is not None,
    )
