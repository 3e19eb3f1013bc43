"""The built-in `offline` agent: deterministic, no network.

It plans from the task description with the vocabulary documented in
`agents.offline_plan`, then carries the plan out step by step through the real tools.
Its plan is written once, when its run is first claimed (`executions.agent_plan`); its state, a small JSON
document beside it on the execution row (`agent_state`), is what each step moves on and saves.
"""

from __future__ import annotations

from typing import Any

from agents.offline_plan import CheckpointSpec, Plan, place_checkpoints, plan_task
from agents.tools import TOOLS, describe_result
from core.errors import ExecutionFailed, FailureCode
from core.models import Checkpoint

MODEL_NAME = "offline"
KIND = "rule-based"
VOCABULARY = (
    'send an e-mail to ADDRESS saying "TEXT"; write a note called NAME saying "TEXT"; summarise the work; '
    "wait N seconds"
)


Steps = list[dict[str, Any]]
"""A plan as the runner keeps it: {tool, args, instruction} for each step, in order."""


def initial_state(description: str, checkpoints: list[Checkpoint]) -> tuple[dict[str, Any], Steps]:
    """The state the plan's steps start from (where each caller checkpoint goes, the cursor) and the plan;
    `ExecutionFailed` (task_not_understood) before any step when the task holds an instruction the agent cannot
    carry out: half a task done is worse than none."""
    plan = plan_task(description)
    not_understood(description, plan)
    gates = place_checkpoints(
        plan.steps,
        [CheckpointSpec(cp.stage, cp.description, cp.verification_question) for cp in checkpoints],
    )
    state = {
        "agent": MODEL_NAME,
        "unrecognised": list(plan.unrecognised),
        # gates[i]: the plan index checkpoint position i is passed before (len(plan) = before finishing).
        "gates": gates,
        "cursor": 0,
    }
    return state, [{"tool": s.tool, "args": s.args, "instruction": s.instruction} for s in plan.steps]


def plan_of(state: dict[str, Any], kept: Steps | None) -> Steps:
    """The run's plan: `kept` (`executions.agent_plan`), or, for a run planned before the plan had a column of its
    own, the one inside its state (which it then goes on saving with each step, as it always did)."""
    if kept is not None:
        return kept
    inside: Steps = state["plan"]
    return inside


def not_understood(description: str, plan: Plan) -> None:
    """Refuse the whole task if any instruction in it is one the agent cannot carry out (or there is none)."""
    # A step whose arguments could never work (a subject with a line break) is one it cannot carry out, too.
    unusable = [step.instruction for step in plan.steps if TOOLS[step.tool].argument_problem(step.args) is not None]
    missed = list(dict.fromkeys([*plan.unrecognised, *unusable])) or ([] if plan.steps else [description.strip()])
    if not missed:
        return
    total = len(dict.fromkeys(step.instruction for step in plan.steps)) + len(plan.unrecognised)
    quoted = "; ".join(repr(m) for m in missed)
    counted = f"{len(missed)} of the task's {total} instructions" if total > 1 else "the task's instruction"
    raise ExecutionFailed(
        FailureCode.TASK_NOT_UNDERSTOOD,
        f"The rule-based offline agent cannot carry out {counted}, so it did nothing: {quoted}. It understands only: "
        f"{VOCABULARY}, with the text given in the task. For other tasks set agentModel (or VOUCH_AGENT_MODEL) "
        "to a language model.",
        instructions=missed,
    )


def guards(plan: Steps, index: int) -> dict[str, Any]:
    """What a checkpoint placed before plan index `index` guards: a step (numbered as in the plan message) or the
    finish. Shown on the checkpoint card so the reviewer sees which action their answer lets through."""
    if index >= len(plan):
        return {"step": None, "tool": "finish", "instruction": "finish the task"}
    step = plan[index]
    return {"step": index + 1, "tool": step["tool"], "instruction": step["instruction"]}


def plan_message(steps: Steps) -> str:
    return "Plan:\n" + "\n".join(f"{i}. {step['instruction']}" for i, step in enumerate(steps, 1))


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
    if state["unrecognised"]:  # only a run planned before task_not_understood existed, resumed
        summary += f" Skipped {len(state['unrecognised'])} instruction(s) I do not understand."
    return {
        "summary": summary,
        "steps": done,
        "unrecognised": list(state["unrecognised"]),
    }
