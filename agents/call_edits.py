"""A reviewer's edits of a call's arguments: taken as the call is loaded (the approval let exactly the edited call
through), and what the agent is told of them once it ran."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.models import CHECKPOINTS, DECISIONS, ToolCall
from core.run_entry import OpenCall

_EDITS_APPROVED = (
    sa.select(DECISIONS.c.edited_args)
    .join(
        CHECKPOINTS,
        sa.and_(CHECKPOINTS.c.id == DECISIONS.c.checkpoint_id, CHECKPOINTS.c.attempt == DECISIONS.c.attempt),
    )
    .where(
        # The execution first: its (execution_id, position) key is the index this lookup runs on.
        CHECKPOINTS.c.execution_id == sa.bindparam("execution_id"),
        CHECKPOINTS.c.tool_call_id == sa.bindparam("tool_call_id"),
        DECISIONS.c.decision == "approve",
        DECISIONS.c.edited_args.is_not(None),
    )
    .order_by(DECISIONS.c.decided_at, DECISIONS.c.id)
)
# The call a step opened, if any: its row, then its edits (`take_edits`), where the step after an approval once
# took three statements (its id, its row, the edits).
_CALL_OF_STEP = sa.select(ToolCall).where(
    ToolCall.execution_id == sa.bindparam("execution_id"), ToolCall.step_index == sa.bindparam("step_index")
)


async def call_of_step(session: AsyncSession, execution_id: str, index: int) -> ToolCall | None:
    """The call opened for step `index` (at its checkpoint, or by a worker that died), with the edits an approval
    of its checkpoint made taken (`take_edits`); None when the step has none."""
    call = (await session.scalars(_CALL_OF_STEP, {"execution_id": execution_id, "step_index": index})).first()
    if call is None:
        return None
    await take_edits(session, call)
    return call


async def take_edits(session: AsyncSession, call: ToolCall) -> None:
    """The arguments the call runs with: the agent's own (kept in `proposed_args` once edited) with the edits of
    every approval of a checkpoint bound to it (review.decide checked them), in the order they were given,
    whichever gate it was: the caller's, an auto-detected one, any agent. Each agent calls it on the call it is
    about to gate or run, before the gates, so a later gate shows its reviewer the call as edited so far and a
    call runs only as approved. Taking them again changes nothing."""
    found = await session.scalars(_EDITS_APPROVED, {"execution_id": call.execution_id, "tool_call_id": call.id})
    # A decision without edits may hold JSON null rather than SQL NULL: not an edit either.
    edits = [edited for edited in found if edited]
    if not edits:
        return
    proposed = dict(call.args if call.proposed_args is None else call.proposed_args)
    approved = proposed.copy()
    for edited in edits:
        approved.update(edited)
    if (call.proposed_args, call.args) != (proposed, approved):
        call.proposed_args, call.args = proposed, approved
        await session.flush()


def edit_note(call: ToolCall | OpenCall) -> dict[str, Any]:
    """What the agent is told when it ran with a reviewer's edits: which arguments changed, from what to what."""
    if call.proposed_args is None:
        return {}
    changed = {
        name: {"proposed": call.proposed_args.get(name), "approved": value}
        for name, value in call.args.items()
        if call.proposed_args.get(name) != value
    }
    return {"reviewerEdited": changed, "note": "The reviewer changed these arguments before approving the call."}
