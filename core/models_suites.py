"""The tables of suites (issue 23): a suite, its task bodies, and every run it plans, each a row from the start.

A run is `pending` until a worker (or the create itself) starts it within the key's concurrency limit, then
`started` with its execution linked; a cancelled suite's pending runs become `cancelled` and never start.
Nothing about a run's progress is copied here: its execution's row is the one truth (api/suite_summary.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from core.models_base import Base, utcnow


class Suite(Base):
    __tablename__ = "suites"
    # The list pages newest first by (created_at, id) within one user, as the executions list does.
    __table_args__ = (sa.Index("ix_suites_user_created", "user_id", "created_at", "id"),)
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    user_id: Mapped[str] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"))
    # The key whose concurrency limit the runs share (api/concurrency.py).
    api_key_id: Mapped[str | None] = mapped_column(sa.ForeignKey("api_keys.id", ondelete="SET NULL"))
    name: Mapped[str] = mapped_column(sa.String(200))
    # None: each task keeps its own testMode; "both" pairs every task with and without verification.
    test_mode: Mapped[str | None] = mapped_column(sa.String(32))
    repeats: Mapped[int] = mapped_column()
    models: Mapped[list[Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    cancelled_at: Mapped[datetime | None] = mapped_column()


class SuiteTask(Base):
    """A task body as validated at the suite's create (api/schemas.py CreateTaskIn), started once per run."""

    __tablename__ = "suite_tasks"
    suite_id: Mapped[str] = mapped_column(sa.ForeignKey("suites.id", ondelete="CASCADE"), primary_key=True)
    task_index: Mapped[int] = mapped_column(primary_key=True)
    task_name: Mapped[str] = mapped_column(sa.String(200))
    body: Mapped[dict[str, Any]] = mapped_column()


class SuiteRun(Base):
    __tablename__ = "suite_runs"
    __table_args__ = (
        sa.UniqueConstraint("suite_id", "position"),
        # The scheduler looks for pending runs only.
        sa.Index("ix_suite_runs_state", "state", "suite_id"),
    )
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    suite_id: Mapped[str] = mapped_column(sa.ForeignKey("suites.id", ondelete="CASCADE"))
    # The order runs start in: repeat by repeat, task by task, the models and modes of a task side by side.
    position: Mapped[int] = mapped_column()
    task_index: Mapped[int] = mapped_column()
    model: Mapped[str] = mapped_column(sa.String(200))
    test_mode: Mapped[str] = mapped_column(sa.String(32))
    repeat: Mapped[int] = mapped_column()
    # pending -> started | cancelled
    state: Mapped[str] = mapped_column(sa.String(16))
    execution_id: Mapped[str | None] = mapped_column(sa.ForeignKey("executions.id", ondelete="SET NULL"), unique=True)
    started_at: Mapped[datetime | None] = mapped_column()


SUITES = cast(sa.Table, Suite.__table__)
SUITE_TASKS = cast(sa.Table, SuiteTask.__table__)
SUITE_RUNS = cast(sa.Table, SuiteRun.__table__)
