"""The review inbox: a signed-in reviewer's waiting checkpoints, one page per checkpoint to decide it,
and the history of what they decided. Every decision goes through `review.decide(via="web")`.

Who sees what is the one rule of review/access.py: the assigned reviewer, and the backup reviewer once
the current attempt was escalated to them. Anyone else gets "not found", so ids cannot be probed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from quart import Blueprint, Response, abort, render_template, request
from sqlalchemy.ext.asyncio import AsyncSession

from core.formatting import age
from core.links import chat_url
from core.models import Checkpoint, Decision, Event, Execution, ReviewTimer, utcnow
from core.tool_args import argument_lines
from core.vocabulary import Channel, CheckpointOrigin, EventType
from core.web.headers import add_page_headers
from core.web.services import db_session, services
from core.web.sessions import CsrfError, client_addr, login_required, see_other, viewer
from review.access import may_decide
from review.decision_errors import DecisionError, InvalidInput
from review.decision_records import decision_history
from review.decisions import decide

blueprint = Blueprint("review_inbox", __name__, url_prefix="/review/inbox")

CONTEXT_EVENTS = 20
HISTORY_ROWS = 50
MAX_COMMENT = 5000


@blueprint.after_request
async def security_headers(response: Response) -> Response:
    return add_page_headers(response)


@blueprint.errorhandler(CsrfError)
async def csrf_failed(error: CsrfError) -> tuple[str, int]:
    page = await render_template("api/error.html", title="Form expired", message=error.message, viewer=None)
    return page, error.status


@dataclass(frozen=True)
class Waiting:
    checkpoint: Checkpoint
    execution: Execution
    age: timedelta
    deadline: datetime | None


async def _deadline(session: AsyncSession, checkpoint: Checkpoint) -> datetime | None:
    return await session.scalar(
        sa.select(ReviewTimer.due_at).where(
            ReviewTimer.checkpoint_id == checkpoint.id,
            ReviewTimer.attempt == checkpoint.attempt,
            ReviewTimer.kind == "deadline",
        )
    )


async def waiting_for(session: AsyncSession, email: str, now: datetime) -> list[Waiting]:
    """Checkpoints `email` may decide now, oldest wait first."""
    rows = await session.execute(
        sa.select(Checkpoint, Execution)
        .join(Execution, Execution.id == Checkpoint.execution_id)
        .where(
            Checkpoint.status == "awaiting_review",
            # A grade (issue 23) waits after its run has ended.
            sa.or_(Execution.status == "awaiting_review", Checkpoint.origin == CheckpointOrigin.GRADE),
            sa.or_(Execution.assigned_reviewer == email, Execution.backup_reviewer == email),
        )
        .order_by(Checkpoint.awaiting_since, Checkpoint.id)
    )
    found = []
    for checkpoint, execution in rows.all():
        if await may_decide(session, execution, checkpoint, email, now):
            since = checkpoint.awaiting_since or now
            found.append(Waiting(checkpoint, execution, now - since, await _deadline(session, checkpoint)))
    return found


async def decided_by(session: AsyncSession, email: str) -> list[tuple[Decision, Checkpoint, Execution]]:
    rows = await session.execute(
        sa.select(Decision, Checkpoint, Execution)
        .join(Checkpoint, Checkpoint.id == Decision.checkpoint_id)
        .join(Execution, Execution.id == Decision.execution_id)
        .where(Decision.decided_by == email)
        .order_by(Decision.decided_at.desc())
        .limit(HISTORY_ROWS)
    )
    return [(d, c, e) for d, c, e in rows.all()]


def event_line(type_: str, payload: dict[str, Any]) -> str:
    """One event as a line of the detail page's context (the chat page shows them in full)."""
    match type_:
        case EventType.AGENT_MESSAGE:
            return str(payload.get("text", ""))
        case EventType.TOOL_CALL:
            return f"Tool call: {payload.get('tool')}"
        case EventType.TOOL_RESULT:
            return f"Tool result: {payload.get('tool')}"
        case EventType.CHECKPOINT_AWAITING_REVIEW:
            return f"Waiting for review at {payload.get('stage')!r} (attempt {payload.get('attempt', 1)})"
        case EventType.CHECKPOINT_DECIDED:
            return (
                f"{payload.get('decision')} by {payload.get('by')} via {payload.get('via')} "
                f"(attempt {payload.get('attempt', 1)})" + (f": {payload['comment']}" if payload.get("comment") else "")
            )
        case EventType.REVIEW_REMINDER_SENT | EventType.REVIEW_ESCALATED:
            return f"{type_.split('.')[1].replace('_', ' ').capitalize()} to {payload.get('to')}"
        case EventType.REVIEW_DEADLINE_PASSED:
            return f"The review deadline passed; policy {payload.get('policy')}"
        case EventType.MAIL_FAILED:
            return f"Mail to {payload.get('to')} could not be sent: {payload.get('reason')}"
    return type_


async def _checkpoint_for(session: AsyncSession, checkpoint_id: str, email: str) -> tuple[Checkpoint, Execution]:
    checkpoint = await session.get(Checkpoint, checkpoint_id) if len(checkpoint_id) <= 64 else None
    execution = await session.get(Execution, checkpoint.execution_id) if checkpoint is not None else None
    if checkpoint is None or execution is None:
        abort(404)
    # Decided checkpoints stay visible to the reviewers named on the execution (their history links here).
    named = email in (execution.assigned_reviewer, execution.backup_reviewer)
    if not (named or await may_decide(session, execution, checkpoint, email, utcnow())):
        abort(404)
    return checkpoint, execution


async def _detail(
    session: AsyncSession,
    checkpoint: Checkpoint,
    execution: Execution,
    *,
    error: str | None = None,
    comment: str = "",
    values: dict[str, str] | None = None,
    bad_argument: str = "",
    grade: dict[str, str] | None = None,
) -> str:
    email = viewer().email
    now = utcnow()
    events = list(
        await session.scalars(
            sa.select(Event).where(Event.execution_id == execution.id).order_by(Event.seq.desc()).limit(CONTEXT_EVENTS)
        )
    )
    base = services().settings.base_url or request.host_url.rstrip("/")
    grading = checkpoint.origin == CheckpointOrigin.GRADE
    can_decide = (
        checkpoint.status == "awaiting_review"
        and (execution.status == "awaiting_review" or grading)
        and await may_decide(session, execution, checkpoint, email, now)
    )
    return await render_template(
        "review/inbox_detail.html",
        viewer=viewer(),
        checkpoint=checkpoint,
        execution=execution,
        events=[(e, event_line(e.type, e.payload)) for e in reversed(events)],
        attempts=await decision_history(session, checkpoint.id),
        deadline=await _deadline(session, checkpoint),
        age=age(now - checkpoint.awaiting_since) if checkpoint.awaiting_since else None,
        can_decide=can_decide,
        chat_link=chat_url(base, services().settings.secret_key, execution.id),
        error=error,
        comment=comment,
        action=checkpoint.next_action,
        # The proposed arguments in full, or what the reviewer typed over them when the form comes back.
        arguments=[(name, (values or {}).get(name, text)) for name, text in argument_lines(action_args(checkpoint))],
        bad_argument=bad_argument,
        grading=grading,
        grade=grade or {},
    )


def action_args(checkpoint: Checkpoint) -> dict[str, Any]:
    return dict((checkpoint.next_action or {}).get("args") or {})


def _lines(value: str) -> str:
    # A browser sends a textarea's line breaks as CRLF: an argument left as it was must compare equal.
    return value.replace("\r\n", "\n")


def _edits(checkpoint: Checkpoint, values: dict[str, str]) -> dict[str, Any] | None:
    """The arguments whose field the reviewer changed; None when none was (a plain approval)."""
    proposed = dict(argument_lines(action_args(checkpoint)))
    changed = {name: value for name, value in values.items() if proposed.get(name) != value}
    return changed or None


@blueprint.get("")
@login_required
async def inbox() -> str:
    session = db_session()
    email = viewer().email
    now = utcnow()
    return await render_template(
        "review/inbox.html",
        viewer=viewer(),
        waiting=await waiting_for(session, email, now),
        history=await decided_by(session, email),
        age_text=age,
        done=request.args.get("done"),
    )


@blueprint.get("/<checkpoint_id>")
@login_required
async def detail(checkpoint_id: str) -> str:
    session = db_session()
    checkpoint, execution = await _checkpoint_for(session, checkpoint_id, viewer().email)
    return await _detail(session, checkpoint, execution)


@blueprint.post("/<checkpoint_id>")
@login_required
async def decide_here(checkpoint_id: str) -> Response | tuple[str, int]:
    session = db_session()
    email = viewer().email
    checkpoint, execution = await _checkpoint_for(session, checkpoint_id, email)
    form = await request.form
    verdict = form.get("decision", "")
    comment = (form.get("comment") or "").strip()[:MAX_COMMENT]
    try:
        attempt = int(form.get("attempt", ""))
    except ValueError:
        abort(400)
    if verdict not in ("approve", "reject"):
        abort(400)
    grade = {"rating": form.get("rating") or "", "labels": (form.get("labels") or "")[:2000]}
    if verdict == "reject" and not comment and checkpoint.origin != CheckpointOrigin.GRADE:
        page = await _detail(
            session, checkpoint, execution, error="Say what the agent should change: a rejection needs a comment."
        )
        return page, 422
    values = {key.removeprefix("arg:"): _lines(value) for key, value in form.items() if key.startswith("arg:")}
    if not await may_decide(session, execution, checkpoint, email, utcnow()):
        abort(404)
    try:
        await decide(
            session,
            checkpoint.id,
            "approve" if verdict == "approve" else "reject",
            by=email,
            via=Channel.WEB,
            comment=comment,
            remote_addr=client_addr(),
            attempt=attempt,  # the attempt the reviewer saw: a stale form cannot answer a newer one
            edited_args=_edits(checkpoint, values) if verdict == "approve" else None,
            rating=grade["rating"],
            labels=grade["labels"],
        )
    except InvalidInput as exc:
        # The 422 rolls the request's transaction back, and with it anything decide() wrote before refusing.
        page = await _detail(
            session,
            checkpoint,
            execution,
            error=f"Not recorded: {exc}.",
            comment=comment,
            values=values,
            bad_argument=exc.argument,
            grade=grade,
        )
        return page, 422
    except DecisionError as exc:  # AlreadyDecided names the winner
        await session.refresh(checkpoint)
        await session.refresh(execution)
        return await _detail(session, checkpoint, execution, error=f"Not recorded: {exc}.", comment=comment), 409
    return see_other(f"/review/inbox?done={checkpoint.id}")
