"""The built-in `offline` agent: deterministic, no network.

It plans from the task description with the vocabulary documented in
`agents.offline_plan`, then carries the plan out step by step through the real tools.
Its whole state is a small JSON document stored on the execution row.
"""

from __future__ import annotations

from typing import Any

from agents.offline_plan import CheckpointSpec, place_checkpoints, plan_task
from agents.tools import describe_result
from core.models import Checkpoint

MODEL_NAME = "offline"


def initial_state(description: str, checkpoints: list[Checkpoint]) -> dict[str, Any]:
    plan = plan_task(description)
    gates = place_checkpoints(
        plan.steps,
        [CheckpointSpec(cp.stage, cp.description, cp.verification_question) for cp in checkpoints],
    )
    return {
        "agent": MODEL_NAME,
        "plan": [{"tool": s.tool, "args": s.args, "instruction": s.instruction} for s in plan.steps],
        "unrecognised": list(plan.unrecognised),
        # gates[i]: the plan index checkpoint position i is passed before (len(plan) = before finishing).
        "gates": gates,
        "cursor": 0,
    }


def plan_message(state: dict[str, Any]) -> str:
    steps = state["plan"]
    if not steps:
        text = "I found no step I know how to do in this task."
    else:
        text = "Plan:\n" + "\n".join(f"{i}. {step['instruction']}" for i, step in enumerate(steps, 1))
    if state["unrecognised"]:
        text += "\nI do not know how to: " + "; ".join(repr(u) for u in state["unrecognised"])
    return text


def step_message(step: dict[str, Any]) -> str:
    args = step["args"]
    match step["tool"]:
        case "send_email":
            return f"Sending an e-mail to {args['to']} with subject {args['subject']!r}."
        case "write_file":
            return f"Writing {args['path']} to the workspace."
        case "summarise":
            return "Summarising what has been done."
        case "wait":
            return f"Waiting {args['seconds']:g} seconds."
    return f"Running {step['tool']}."


def final_result(state: dict[str, Any], results: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    done = [describe_result(tool, result) for tool, result in results]
    summary = f"Completed {len(done)} step(s)" + (": " + "; ".join(done) + "." if done else ".")
    if state["unrecognised"]:
        summary += f" Skipped {len(state['unrecognised'])} instruction(s) I do not understand."
    return {
        "summary": summary,
        "steps": done,
        "unrecognised": list(state["unrecognised"]),
    }


def revise(state: dict[str, Any], checkpoint_id: str, attempt: int, comment: str) -> str:
    """Take a reviewer's rejection in: keep the comment verbatim in the state, and say how the agent revises.

    The offline agent's rule: it cannot rewrite its plan from free text, so it re-presents the step it is
    about to take at the checkpoint (with the comment) and asks again. Steps already done before the checkpoint
    are not repeated: their side effects happened once and are recorded (DESIGN: side effects exactly once).
    A model-backed agent gets the same comment in its history and may change its next step.
    """
    revisions: list[dict[str, Any]] = list(state.get("revisions", []))
    revisions.append({"checkpointId": checkpoint_id, "attempt": attempt, "comment": comment})
    state["revisions"] = revisions
    gate_steps = state["plan"]
    cursor = state["cursor"]
    upcoming = gate_steps[cursor]["instruction"] if cursor < len(gate_steps) else "finish the task"
    said = comment if comment else "(no comment given)"
    return (
        f"Revising after the reviewer's comment: {said}\nI will ask again before I {upcoming} (attempt {attempt + 1})."
    )


def revised(state: dict[str, Any], checkpoint_id: str, attempt: int) -> bool:
    return any(r["checkpointId"] == checkpoint_id and r["attempt"] == attempt for r in state.get("revisions", []))
