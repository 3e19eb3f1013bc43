"""Checkpoints as the runner meets them: found or made for a call, and their verdicts read back.

A pause always names the checkpoint and the attempt it waits on. When the execution runs again, the
runner reads the decision on exactly that attempt: approve lets the action go ahead, reject hands the
reviewer's comment back to the agent.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from agents.policy import SideEffect
from core.ids import new_id
from core.models import CHECKPOINTS, Checkpoint, Decision


@dataclass(frozen=True)
class Verdict:
    decision: str  # approve | reject
    by: str
    via: str
    comment: str


async def verdict(session: AsyncSession, checkpoint_id: str, attempt: int) -> Verdict | None:
    row = await session.scalar(
        sa.select(Decision).where(Decision.checkpoint_id == checkpoint_id, Decision.attempt == attempt)
    )
    if row is None:
        return None
    return Verdict(row.decision, row.decided_by, row.via, row.comment)


async def next_position(session: AsyncSession, execution_id: str) -> int:
    highest = await session.scalar(
        sa.select(sa.func.max(Checkpoint.position)).where(Checkpoint.execution_id == execution_id)
    )
    return 0 if highest is None else highest + 1


async def gate_for_call(
    session: AsyncSession, execution_id: str, tool_call_id: str, effect: SideEffect, call_text: str
) -> Checkpoint:
    """The checkpoint that reviews this call: one detected before the run for this kind of side effect and
    not used yet, or one whose earlier call was rejected (the agent's next try is its next attempt), or a
    new one. Bound to the call, so the review shows exactly this tool and these arguments."""
    candidates = await session.scalars(
        sa.select(Checkpoint)
        .where(
            Checkpoint.execution_id == execution_id,
            Checkpoint.origin == "auto",
            Checkpoint.status == "pending",
            Checkpoint.stage == effect.stage,
        )
        .order_by(Checkpoint.position)
    )
    checkpoint = next(iter(candidates), None)
    if checkpoint is None:
        checkpoint = Checkpoint(
            id=new_id("chk"),
            execution_id=execution_id,
            position=await next_position(session, execution_id),
            stage=effect.stage,
            description=f"The agent wants to {call_text}.",
            verification_question=effect.question,
            origin="auto",
            status="pending",
        )
        session.add(checkpoint)
    checkpoint.tool_call_id = tool_call_id
    await session.flush()
    return checkpoint


async def unknown_outcome_gate(
    session: AsyncSession, execution_id: str, tool_call_id: str, call_text: str
) -> Checkpoint:
    """A checkpoint for a call whose worker died between acting and recording: did it happen or not?"""
    existing = await session.scalar(
        sa.select(Checkpoint).where(
            Checkpoint.execution_id == execution_id,
            Checkpoint.tool_call_id == tool_call_id,
            Checkpoint.stage == UNKNOWN_OUTCOME_STAGE,
        )
    )
    if existing is not None:
        return existing
    checkpoint = Checkpoint(
        id=new_id("chk"),
        execution_id=execution_id,
        position=await next_position(session, execution_id),
        stage=UNKNOWN_OUTCOME_STAGE,
        description=(
            f"The worker stopped while the agent was about to {call_text}. It is not known whether that "
            "happened. Approve to run it again; reject to tell the agent it was not repeated."
        ),
        verification_question="Should the agent run this call again?",
        origin="auto",
        status="pending",
        tool_call_id=tool_call_id,
    )
    session.add(checkpoint)
    await session.flush()
    return checkpoint


UNKNOWN_OUTCOME_STAGE = "Outcome unknown after a crash"


# Built once (the runner's every claim meets them): Core statements on the table, no ORM row unless one is found.
# A checkpoint of the execution (parameter `execution_id`) still waiting to be passed: reviewed before the
# execution may complete (`unreviewed`, and the statement of a run's last step in agents/runner.py).
UNREVIEWED = (CHECKPOINTS.c.execution_id == sa.bindparam("execution_id"), CHECKPOINTS.c.status == "pending")
_FIRST_UNREVIEWED = sa.select(CHECKPOINTS.c.id).where(*UNREVIEWED).order_by(CHECKPOINTS.c.position).limit(1)
_PENDING_CALLER = (
    sa.select(CHECKPOINTS.c.id, CHECKPOINTS.c.position)
    .where(
        CHECKPOINTS.c.execution_id == sa.bindparam("execution_id"),
        CHECKPOINTS.c.status == "pending",
        CHECKPOINTS.c.origin == "caller",
    )
    .order_by(CHECKPOINTS.c.position)
)


async def unreviewed(session: AsyncSession, execution_id: str) -> Checkpoint | None:
    """The first checkpoint still waiting to be passed: reviewed before the execution may complete,
    whether or not the agent asked for it."""
    found = await session.scalar(_FIRST_UNREVIEWED, {"execution_id": execution_id})
    return None if found is None else await session.get_one(Checkpoint, found)


async def pending_caller_positions(session: AsyncSession, execution_id: str) -> list[tuple[str, int]]:
    """(id, position) of the caller's checkpoints not passed yet, in the order the agent meets them."""
    rows = await session.execute(_PENDING_CALLER, {"execution_id": execution_id})
    return [(checkpoint_id, position) for checkpoint_id, position in rows]


async def pending_caller_checkpoints(session: AsyncSession, execution_id: str) -> list[Checkpoint]:
    """The caller's checkpoints not passed yet, in the order the agent meets them."""
    rows = await session.scalars(
        sa.select(Checkpoint)
        .where(
            Checkpoint.execution_id == execution_id,
            Checkpoint.status == "pending",
            Checkpoint.origin == "caller",
        )
        .order_by(Checkpoint.position)
    )
    return list(rows)


async def caller_gate(session: AsyncSession, execution_id: str, tool_call_id: str) -> Checkpoint | None:
    """The caller's checkpoint a call that acts on the world must pass before it runs: the one it already waits
    at, else the earliest unanswered one, bound to this call (the reviewer approves exactly this call). None once
    the call passed its checkpoint, or when every caller checkpoint is answered.

    Each call passes one checkpoint, the next in order: the caller's stages guard successive side effects, so a
    second mail meets the second checkpoint, and no call ever runs while an earlier stage is unanswered."""
    bound = await session.scalar(
        sa.select(Checkpoint).where(
            Checkpoint.execution_id == execution_id,
            Checkpoint.origin == "caller",
            Checkpoint.tool_call_id == tool_call_id,
        )
    )
    if bound is not None and bound.status in ("approved", "auto_approved"):
        return None
    if bound is not None and bound.status == "pending":
        return bound
    checkpoint = next(iter(await pending_caller_checkpoints(session, execution_id)), None)
    if checkpoint is not None:
        checkpoint.tool_call_id = tool_call_id
        await session.flush()
    return checkpoint
