"""The tables. An execution, each of its steps, pauses and decisions are rows.

Every table is importable from here: the base and column types live in core/models_base.py, the accounts' and
browsers' tables in core/models_accounts.py (split by noun; this module re-exports them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from core.compressed_text import CompressedText
from core.models_accounts import ApiKey, ApiKeyUsage, IdempotencyRecord, SigninFailure, SignupRequest, User, WebSession
from core.models_base import NAMING, Base, BigId, UTCDateTime, utcnow
from core.models_suites import SUITE_RUNS, SUITE_TASKS, SUITES, Suite, SuiteRun, SuiteTask

# What this module passes on from the split ones; the tables defined below are importable as ever.
__all__ = [  # noqa: RUF022  (grouped by module)
    "ApiKey",
    "ApiKeyUsage",
    "IdempotencyRecord",
    "SigninFailure",
    "SignupRequest",
    "User",
    "WebSession",
    "SUITES",
    "SUITE_RUNS",
    "SUITE_TASKS",
    "Suite",
    "SuiteRun",
    "SuiteTask",
    "NAMING",
    "Base",
    "BigId",
    "UTCDateTime",
    "utcnow",
]


class Execution(Base):
    __tablename__ = "executions"
    __table_args__ = (
        sa.Index("ix_executions_claim", "status", "lease_until"),
        # The list endpoint pages newest first by (created_at, id) within one user.
        sa.Index("ix_executions_user_created", "user_id", "created_at", "id"),
        # Every create counts its key's executions in progress (api/concurrency.py).
        sa.Index("ix_executions_key_status", "api_key_id", "status"),
    )
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    user_id: Mapped[str] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"), index=True)
    api_key_id: Mapped[str | None] = mapped_column(sa.ForeignKey("api_keys.id", ondelete="SET NULL"))
    task_name: Mapped[str] = mapped_column(sa.String(200))
    task_description: Mapped[str] = mapped_column(sa.Text)
    test_mode: Mapped[str] = mapped_column(sa.String(32))
    assigned_reviewer: Mapped[str | None] = mapped_column(sa.String(320), index=True)
    webhook_url: Mapped[str | None] = mapped_column(sa.String(2048))
    auto_detect_checkpoints: Mapped[bool] = mapped_column(default=False)
    agent_model: Mapped[str] = mapped_column(sa.String(200))
    status: Mapped[str] = mapped_column(sa.String(32))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column()
    completed_at: Mapped[datetime | None] = mapped_column()
    result: Mapped[dict[str, Any] | None] = mapped_column()
    error: Mapped[str | None] = mapped_column(sa.Text)
    # The same failure as {code, detail, ...} (core/errors.py); null on rows failed before codes existed.
    error_info: Mapped[dict[str, Any] | None] = mapped_column()
    # Highest event seq handed out; incremented in the same transaction as the event row.
    last_seq: Mapped[int] = mapped_column(default=0)
    worker_id: Mapped[str | None] = mapped_column(sa.String(100))
    lease_until: Mapped[datetime | None] = mapped_column()
    # Bumped on every claim: a worker whose epoch is stale may not write (fencing).
    lease_epoch: Mapped[int] = mapped_column(default=0)
    # The agent's persisted progress (cursor, history), saved at every step: with the plan, enough to resume anywhere.
    agent_state: Mapped[dict[str, Any] | None] = mapped_column()
    # The offline agent's plan, written once by the first claim (null for a model, and for runs planned before
    # migration 0021, whose plan is inside agent_state).
    agent_plan: Mapped[list[Any] | None] = mapped_column()
    # Review policy (issue 5): rejections allowed per checkpoint before the run ends rejected,
    # a backup reviewer for escalation, and what happens when nobody answers by the deadline.
    max_revisions: Mapped[int] = mapped_column(default=3, server_default="3")
    backup_reviewer: Mapped[str | None] = mapped_column(sa.String(320))
    review_deadline_seconds: Mapped[int | None] = mapped_column()
    on_deadline: Mapped[str] = mapped_column(sa.String(16), default="reject", server_default="reject")
    # Issue 7: webhook event types beyond execution.completed that the caller asked for
    # ("checkpoint.awaiting_review", "checkpoint.decided"); None = completion only.
    webhook_events: Mapped[list[Any] | None] = mapped_column()
    # False for a rule-based agent (the offline one): it cannot revise from a rejection's comment, so a
    # rejection ends its run (review/decisions.py); set at creation.
    reads_comments: Mapped[bool] = mapped_column(default=True, server_default=sa.true())
    # Issue 23: what the run should produce (any JSON value) and the scorers that judge it (core/scorers.py).
    expected: Mapped[Any] = mapped_column(sa.JSON(none_as_null=True), nullable=True)
    scorers: Mapped[list[Any] | None] = mapped_column()
    # The verdict, in columns a suite aggregates in SQL: state None (no scorers) | pending (to score once the
    # run ends) | grading (a reviewer's grade waits) | done. passed true/false/null, score 0..1/null, and the
    # per-scorer list [{scorer, type, passed, score, explanation, by, ...}].
    verdict_state: Mapped[str | None] = mapped_column(sa.String(16), index=True)
    verdict_passed: Mapped[bool | None] = mapped_column()
    verdict_score: Mapped[float | None] = mapped_column(sa.Float)
    verdict_scores: Mapped[list[Any] | None] = mapped_column()
    verdict_at: Mapped[datetime | None] = mapped_column()
    # The scoring worker's claim: a worker that dies while a judge thinks leaves it to lapse (agents/scoring.py).
    verdict_lease_until: Mapped[datetime | None] = mapped_column()
    # Issue 23: the suite that started this run, if any; its end wakes the suite schedulers (core/webhooks.py).
    suite_id: Mapped[str | None] = mapped_column(sa.ForeignKey("suites.id", ondelete="SET NULL"))


# The table itself, for Core statements on the agent's hot path (no ORM attribute machinery).
EXECUTIONS = cast(sa.Table, Execution.__table__)


class Checkpoint(Base):
    __tablename__ = "checkpoints"
    __table_args__ = (sa.UniqueConstraint("execution_id", "position"),)
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    execution_id: Mapped[str] = mapped_column(sa.ForeignKey("executions.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column()
    stage: Mapped[str] = mapped_column(sa.String(200))
    description: Mapped[str] = mapped_column(sa.Text, default="")
    verification_question: Mapped[str] = mapped_column(sa.Text)
    origin: Mapped[str] = mapped_column(sa.String(16))
    status: Mapped[str] = mapped_column(sa.String(32), default="pending")
    awaiting_since: Mapped[datetime | None] = mapped_column()
    # Numbered review attempts: a rejection sends the agent back to revise and ask again.
    attempt: Mapped[int] = mapped_column(default=1, server_default="1")
    # Issue 6: the tool call an auto checkpoint gates (its exact tool and arguments), when there is one.
    tool_call_id: Mapped[str | None] = mapped_column(sa.String(40))
    # Issue 20: the action the agent proposed when it last paused here ({tool, args, instruction, toolCallId,
    # editable}); kept once decided, for the audit. None until the agent has paused here.
    next_action: Mapped[dict[str, Any] | None] = mapped_column()


CHECKPOINTS = cast(sa.Table, Checkpoint.__table__)


class Decision(Base):
    __tablename__ = "decisions"
    # Unique per attempt: the database itself lets only the first answer to an attempt in.
    __table_args__ = (sa.UniqueConstraint("checkpoint_id", "attempt"),)
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    checkpoint_id: Mapped[str] = mapped_column(sa.ForeignKey("checkpoints.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(default=1, server_default="1")
    execution_id: Mapped[str] = mapped_column(sa.ForeignKey("executions.id", ondelete="CASCADE"), index=True)
    decision: Mapped[str] = mapped_column(sa.String(16))
    decided_by: Mapped[str] = mapped_column(sa.String(320))
    via: Mapped[str] = mapped_column(sa.String(16))
    comment: Mapped[str] = mapped_column(sa.Text, default="")
    remote_addr: Mapped[str | None] = mapped_column(sa.String(64))
    decided_at: Mapped[datetime] = mapped_column(default=utcnow)
    # An approval with edited arguments: the arguments proposed, and the ones the reviewer changed.
    original_args: Mapped[dict[str, Any] | None] = mapped_column()
    edited_args: Mapped[dict[str, Any] | None] = mapped_column()
    # Issue 23: a reviewer's optional grade of what they saw (1-5) and labels: kept with the decision.
    rating: Mapped[int | None] = mapped_column()
    labels: Mapped[list[Any] | None] = mapped_column()


DECISIONS = cast(sa.Table, Decision.__table__)


class Event(Base):
    __tablename__ = "events"
    __table_args__ = (sa.UniqueConstraint("execution_id", "seq"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    execution_id: Mapped[str] = mapped_column(sa.ForeignKey("executions.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column()
    type: Mapped[str] = mapped_column(sa.String(64))
    payload: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


EVENTS = cast(sa.Table, Event.__table__)


class ExternalKey(Base):
    """The caller's key of something an external agent sent (an event, a checkpoint), and what it became: a
    retried request finds its key here and answers as the first time, never adding it twice."""

    __tablename__ = "external_keys"
    execution_id: Mapped[str] = mapped_column(sa.ForeignKey("executions.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(sa.String(16))  # "event" or "checkpoint"
    # The event's seq, or the checkpoint's id.
    ref: Mapped[str] = mapped_column(sa.String(40))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ToolCall(Base):
    __tablename__ = "tool_calls"
    __table_args__ = (sa.UniqueConstraint("execution_id", "step_index"),)
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    execution_id: Mapped[str] = mapped_column(sa.ForeignKey("executions.id", ondelete="CASCADE"))
    step_index: Mapped[int] = mapped_column()
    tool: Mapped[str] = mapped_column(sa.String(64))
    args: Mapped[dict[str, Any]] = mapped_column()
    # The model's own id for the call (an LLM's tool_call_id); None for the offline agent.
    provider_call_id: Mapped[str | None] = mapped_column(sa.String(200))
    # The agent's own arguments, when a reviewer's approval edited them (then `args` holds the edited ones).
    proposed_args: Mapped[dict[str, Any] | None] = mapped_column()
    status: Mapped[str] = mapped_column(sa.String(16))
    result: Mapped[dict[str, Any] | None] = mapped_column()
    error: Mapped[str | None] = mapped_column(sa.Text)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column()


TOOL_CALLS = cast(sa.Table, ToolCall.__table__)


class MailMessage(Base):
    """Outgoing mail: an outbox row written in the transaction that decided to send it."""

    __tablename__ = "mail_messages"
    __table_args__ = (sa.Index("ix_mail_messages_status", "status", "next_attempt_at"),)
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    # Stable across retries and resumes: the same intent is one message.
    message_key: Mapped[str] = mapped_column(sa.String(200), unique=True)
    execution_id: Mapped[str | None] = mapped_column(sa.ForeignKey("executions.id", ondelete="SET NULL"), index=True)
    sender: Mapped[str] = mapped_column(sa.String(320))
    recipient: Mapped[str] = mapped_column(sa.String(320))
    subject: Mapped[str] = mapped_column(sa.String(998))
    text_body: Mapped[str] = mapped_column(CompressedText)
    html_body: Mapped[str | None] = mapped_column(CompressedText)
    # queued -> sent | failed over SMTP; dev_mailbox when no SMTP server is configured.
    status: Mapped[str] = mapped_column(sa.String(16))
    attempts: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column()
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column()


class WorkspaceFile(Base):
    __tablename__ = "workspace_files"
    execution_id: Mapped[str] = mapped_column(sa.ForeignKey("executions.id", ondelete="CASCADE"), primary_key=True)
    path: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    content: Mapped[str] = mapped_column(sa.Text)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


WORKSPACE_FILES = cast(sa.Table, WorkspaceFile.__table__)


class ReviewLink(Base):
    """A reviewer's single-use link or reply token for one attempt of a checkpoint; stored as an HMAC."""

    __tablename__ = "review_links"
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    token_digest: Mapped[str] = mapped_column(sa.String(64), unique=True)
    checkpoint_id: Mapped[str] = mapped_column(sa.ForeignKey("checkpoints.id", ondelete="CASCADE"), index=True)
    execution_id: Mapped[str] = mapped_column(sa.ForeignKey("executions.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column()
    reviewer_email: Mapped[str] = mapped_column(sa.String(320))
    # approve | reject | reply (the token carried in a reply's address or subject)
    purpose: Mapped[str] = mapped_column(sa.String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()
    used_at: Mapped[datetime | None] = mapped_column()


class ReviewTimer(Base):
    """A durable timer: a reminder, an escalation or a deadline for one attempt of a checkpoint."""

    __tablename__ = "review_timers"
    __table_args__ = (
        sa.UniqueConstraint("checkpoint_id", "attempt", "kind"),
        sa.Index("ix_review_timers_due", "fired_at", "due_at"),
    )
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    execution_id: Mapped[str] = mapped_column(sa.ForeignKey("executions.id", ondelete="CASCADE"), index=True)
    checkpoint_id: Mapped[str] = mapped_column(sa.ForeignKey("checkpoints.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column()
    # reminder | escalation | deadline
    kind: Mapped[str] = mapped_column(sa.String(16))
    due_at: Mapped[datetime] = mapped_column()
    fired_at: Mapped[datetime | None] = mapped_column()


class WebhookDelivery(Base):
    """One webhook message (its id is the `webhook-id` header, stable across retries): an outbox row
    written in the transaction that produced the event it reports."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (sa.Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),)
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    execution_id: Mapped[str] = mapped_column(sa.ForeignKey("executions.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[str] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"))
    event_type: Mapped[str] = mapped_column(sa.String(64))
    url: Mapped[str] = mapped_column(sa.String(2048))
    payload: Mapped[dict[str, Any]] = mapped_column()
    # pending -> succeeded | failed (gave up or 410); a redelivery sets it pending again.
    status: Mapped[str] = mapped_column(sa.String(16))
    attempts: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column()
    # Lease of the worker sending it now, so two workers never send one attempt twice.
    locked_until: Mapped[datetime | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column()


class TraceExport(Base):
    """Spans to export over OTLP (core/trace_export.py): an outbox row written in the transaction of the event
    that ends what they describe, when OTEL_EXPORTER_OTLP_ENDPOINT is set. `unit` is `run` (the agent run, its
    model requests and tool calls, written with the final event) or `review:<checkpoint>:<attempt>` (one review
    wait, written with its decision); one row per unit, so each is exported once."""

    __tablename__ = "trace_exports"
    __table_args__ = (
        sa.UniqueConstraint("execution_id", "unit"),
        sa.Index("ix_trace_exports_due", "status", "next_attempt_at"),
    )
    id: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    execution_id: Mapped[str] = mapped_column(sa.ForeignKey("executions.id", ondelete="CASCADE"))
    unit: Mapped[str] = mapped_column(sa.String(120))
    # pending -> sent | failed (the collector refused it on every attempt).
    status: Mapped[str] = mapped_column(sa.String(16))
    attempts: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column()
    # Lease of the worker exporting it now, so two workers never send it at once.
    locked_until: Mapped[datetime | None] = mapped_column()
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column()


class WebhookAttempt(Base):
    """One HTTP attempt of a delivery: the delivery log."""

    __tablename__ = "webhook_attempts"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str] = mapped_column(sa.ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column()
    started_at: Mapped[datetime] = mapped_column()
    status_code: Mapped[int | None] = mapped_column()
    latency_ms: Mapped[int | None] = mapped_column()
    # The first KiB of the answer's body.
    response_excerpt: Mapped[str | None] = mapped_column(sa.Text)
    error: Mapped[str | None] = mapped_column(sa.Text)


class WebhookSecret(Base):
    """A user's webhook signing secret generation. The secret itself is derived from the server key
    (HMAC of user id and generation), so none is stored; during a rotation the previous generation
    signs too until `retires_at`."""

    __tablename__ = "webhook_secrets"
    user_id: Mapped[str] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    generation: Mapped[int] = mapped_column(default=1)
    previous_generation: Mapped[int | None] = mapped_column()
    retires_at: Mapped[datetime | None] = mapped_column()
    rotated_at: Mapped[datetime | None] = mapped_column()
