"""The signed-in owner's suites: a list, and one comparison page per suite (a table per model, the pass rates with
their intervals and cost against pass rate as server-drawn SVG, the task x model grid, and for a suite run both
with and without verification, what human review changed, task by task).

The page reads the same record the API answers (api/suites.py suite_record), computed in the database. Another user's
suite is as absent as one that never existed (404), as in the API.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from quart import Blueprint, abort, render_template

from api.pages import suite_charts, suite_grid
from api.suites import all_runs, suite_record, suite_status
from core.formatting import duration as duration_text
from core.models import Suite
from core.suite_summary import progress_of
from core.web.services import db_session
from core.web.sessions import login_required, viewer

blueprint = Blueprint("suite_pages", __name__)

MAX_ID = 64
LIST_SIZE = 100


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def _moment(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


@blueprint.get("/suites")
@login_required
async def suites_list() -> str:
    session = db_session()
    found = list(
        await session.scalars(
            sa.select(Suite)
            .where(Suite.user_id == viewer().user_id)
            .order_by(Suite.created_at.desc(), Suite.id.desc())
            .limit(LIST_SIZE + 1)
        )
    )
    shown = found[:LIST_SIZE]
    progress = await progress_of(session, [suite.id for suite in shown])
    rows = [
        {"suite": suite, "status": suite_status(suite, progress[suite.id])[0], "progress": progress[suite.id]}
        for suite in shown
    ]
    return await render_template("api/suites.html", suites=rows, more=len(found) > LIST_SIZE)


@blueprint.get("/suites/<suite_id>")
@login_required
async def suite_page(suite_id: str) -> str:
    session = db_session()
    suite = await session.get(Suite, suite_id) if len(suite_id) <= MAX_ID else None
    if suite is None or suite.user_id != viewer().user_id:
        abort(404)
    summary: dict[str, Any] = {**await suite_record(session, suite), "runs": await all_runs(session, suite.id)}
    columns, rows = suite_grid.grid(summary)
    by_model = summary.get("byModel", [])
    return await render_template(
        "api/suite.html",
        suite=summary,
        progress=summary.get("progress", {}),
        created_at=_moment(summary.get("createdAt")),
        finished_at=_moment(summary.get("finishedAt")),
        by_model=by_model,
        rate_chart=suite_charts.pass_rates(by_model),
        scatter=suite_charts.cost_against_pass_rate(by_model),
        columns=columns,
        grid_rows=rows,
        oversight=suite_grid.oversight(summary),
        percent=percent,
        span=duration_text,
    )
