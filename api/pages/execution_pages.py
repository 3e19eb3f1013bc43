"""The signed-in owner's executions: a filtered, paged list with summary charts, and one page per execution
(status, checkpoints with their decisions, metrics, a timeline, the webhook delivery log and a redeliver form).

Another user's execution is as absent as one that never existed (404), as in the API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from urllib.parse import urlencode

import sqlalchemy as sa
from quart import Blueprint, Response, abort, render_template, request
from sqlalchemy.ext.asyncio import AsyncSession

from api.pages import charts
from core.formatting import duration as duration_text
from core.metrics import load_facts, metrics_of, review_waits
from core.models import Decision, Event, Execution, utcnow
from core.vocabulary import FINAL, EventType
from core.web.services import db_session
from core.web.sessions import login_required, see_other, viewer
from core.webhooks import RedeliveryRefused, deliveries_of, redeliver

blueprint = Blueprint("executions_pages", __name__)

PAGE_SIZE = 25
MAX_QUERY = 200
MAX_CHART_DAYS = 62
DEFAULT_CHART_DAYS = 14
MAX_ID = 64
# What a refused redelivery says; the code comes from core.webhooks, the words from here (nothing reflected).
REDELIVER_MESSAGES = {
    "queued": "The completion notification is queued for delivery again.",
    "webhook_not_configured": "This execution has no webhook URL to deliver to.",
    "execution_not_finished": "The notification is sent once the execution finishes.",
}


@dataclass
class ListFilter:
    """The list's query string, checked: bad values are dropped and said so, never echoed into SQL."""

    status: str = ""
    start: date | None = None
    end: date | None = None
    q: str = ""
    page: int = 1
    errors: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, args: Any) -> ListFilter:
        found = cls(q=(args.get("q") or "").strip()[:MAX_QUERY])
        status = args.get("status") or ""
        if status in charts.STATUS_ORDER:
            found.status = status
        elif status:
            found.errors.append("Unknown status: showing every status.")
        for name in ("from", "to"):
            raw = (args.get(name) or "").strip()
            if not raw:
                continue
            try:
                value = date.fromisoformat(raw)
            except ValueError:
                found.errors.append(f"The “{name}” date must be YYYY-MM-DD: ignored.")
                continue
            if name == "from":
                found.start = value
            else:
                found.end = value
        try:
            found.page = max(1, min(100_000, int(args.get("page") or 1)))
        except ValueError:
            found.page = 1
        return found

    def query(self, **changes: Any) -> str:
        """This filter's query string, with `changes` (for the pager's links)."""
        values = {
            "status": self.status,
            "from": self.start.isoformat() if self.start else "",
            "to": self.end.isoformat() if self.end else "",
            "q": self.q,
            "page": self.page,
            **changes,
        }
        return urlencode({k: v for k, v in values.items() if v and not (k == "page" and v == 1)})

    def where(self, user_id: str) -> list[sa.ColumnElement[bool]]:
        clauses: list[sa.ColumnElement[bool]] = [Execution.user_id == user_id]
        if self.status:
            clauses.append(Execution.status == self.status)
        if self.start:
            clauses.append(Execution.created_at >= datetime.combine(self.start, time(0), tzinfo=UTC))
        if self.end:
            clauses.append(Execution.created_at < datetime.combine(self.end + timedelta(days=1), time(0), tzinfo=UTC))
        if self.q:
            # The search is literal: %, _ and \ typed by the user match themselves.
            escaped = self.q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            clauses.append(Execution.task_name.ilike(f"%{escaped}%", escape="\\"))
        return clauses

    def chart_days(self, today: date) -> tuple[date, date]:
        last = min(self.end or today, today) if not self.start or not self.end else self.end
        first = self.start or last - timedelta(days=DEFAULT_CHART_DAYS - 1)
        first = max(first, last - timedelta(days=MAX_CHART_DAYS - 1))
        return (first, last) if first <= last else (last, last)


async def _decided_waits(session: AsyncSession, executions: sa.Select[Any]) -> list[float]:
    """Seconds each decided review wait of these executions lasted (pause event → decision)."""
    rows = await session.execute(
        sa.select(Decision.checkpoint_id, Decision.attempt, Decision.decided_at, Event.payload, Event.created_at)
        .join(
            Event,
            sa.and_(Event.execution_id == Decision.execution_id, Event.type == EventType.CHECKPOINT_AWAITING_REVIEW),
        )
        .where(Decision.via != "auto", Decision.execution_id.in_(executions))
    )
    return [
        max(0.0, (decided_at - paused_at).total_seconds())
        for checkpoint_id, attempt, decided_at, payload, paused_at in rows.all()
        if payload.get("checkpointId") == checkpoint_id and int(payload.get("attempt", 1)) == attempt
    ]


@blueprint.get("/executions")
@login_required
async def list_executions() -> str:
    session = db_session()
    found = ListFilter.parse(request.args)
    where = found.where(viewer().user_id)
    total = int(await session.scalar(sa.select(sa.func.count()).select_from(Execution).where(*where)) or 0)
    pages = max(1, -(-total // PAGE_SIZE))
    found.page = min(found.page, pages)
    rows = list(
        await session.scalars(
            sa.select(Execution)
            .where(*where)
            .order_by(Execution.created_at.desc(), Execution.id.desc())
            .limit(PAGE_SIZE)
            .offset((found.page - 1) * PAGE_SIZE)
        )
    )
    first, last = found.chart_days(utcnow().date())
    in_range = [
        *where,
        Execution.created_at >= datetime.combine(first, time(0), tzinfo=UTC),
        Execution.created_at < datetime.combine(last + timedelta(days=1), time(0), tzinfo=UTC),
    ]
    created = (await session.execute(sa.select(Execution.created_at, Execution.status).where(*in_range))).all()
    waits = await _decided_waits(session, sa.select(Execution.id).where(*in_range))
    return await render_template(
        "api/executions.html",
        executions=rows,
        filter=found,
        total=total,
        pages=pages,
        statuses=charts.STATUS_ORDER,
        chart_first=first,
        chart_last=last,
        by_status=charts.status_over_time([(c, s) for c, s in created], first, last),
        wait_chart=charts.wait_distribution(waits),
        wait_count=len(waits),
    )


async def _own_execution(session: AsyncSession, execution_id: str) -> Execution:
    """The signed-in user's execution; anyone else's is as absent as one that never existed."""
    execution = await session.get(Execution, execution_id) if len(execution_id) <= MAX_ID else None
    if execution is None or execution.user_id != viewer().user_id:
        abort(404)
    return execution


@blueprint.get("/executions/<execution_id>")
@login_required
async def execution_page(execution_id: str) -> str:
    session = db_session()
    execution = await _own_execution(session, execution_id)
    facts = await load_facts(session, execution)
    history: dict[str, list[Decision]] = {}
    for decision in facts.decisions:
        history.setdefault(decision.checkpoint_id, []).append(decision)
    names = {cp.id: f"{cp.position + 1}. {cp.stage}" for cp in facts.checkpoints}
    notice = REDELIVER_MESSAGES.get(request.args.get("redeliver") or "")
    return await render_template(
        "api/execution.html",
        execution=execution,
        metrics=metrics_of(facts),
        checkpoints=[(cp, sorted(history.get(cp.id, []), key=lambda d: d.attempt)) for cp in facts.checkpoints],
        waits=review_waits(facts),
        names=names,
        timeline=charts.timeline(facts, names),
        deliveries=await deliveries_of(session, execution.id),
        can_redeliver=bool(execution.webhook_url) and execution.status in FINAL,
        notice=notice,
        span=duration_text,
    )


@blueprint.post("/executions/<execution_id>/webhook/redeliver")
@login_required
async def redeliver_webhook(execution_id: str) -> Response:
    session = db_session()
    execution = await _own_execution(session, execution_id)
    try:
        await redeliver(session, execution)
    except RedeliveryRefused as refused:
        code = refused.code if refused.code in REDELIVER_MESSAGES else "execution_not_finished"
        return see_other(f"/executions/{execution.id}?redeliver={code}#webhooks")
    return see_other(f"/executions/{execution.id}?redeliver=queued#webhooks")
