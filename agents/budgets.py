"""A run's budgets: steps, seconds of agent time and tokens, fixed in its state when it starts (from the settings
of that moment), counted as it works, and checked before each turn."""

from __future__ import annotations

from typing import Any

from core.errors import ExecutionFailed, FailureCode
from core.settings import Settings


class BudgetExceeded(ExecutionFailed):
    """The execution used up one of its budgets (steps, agent time, tokens); the code names which."""


_BUDGETS = (
    ("steps", "steps", FailureCode.STEP_BUDGET_EXHAUSTED),
    ("seconds", "seconds of agent time", FailureCode.TIME_BUDGET_EXHAUSTED),
    ("tokens", "tokens", FailureCode.TOKEN_BUDGET_EXHAUSTED),
)


def from_settings(settings: Settings) -> dict[str, Any]:
    """The budget a run starts with."""
    return {
        "steps": settings.agent_max_steps,
        "seconds": settings.agent_max_seconds,
        "tokens": settings.agent_max_tokens,
    }


def no_usage() -> dict[str, Any]:
    """What a run has used before its first turn."""
    return {"steps": 0, "seconds": 0.0, "tokens": 0}


def spend(state: dict[str, Any], *, steps: int = 0, seconds: float = 0.0, tokens: int = 0) -> None:
    """Count work against the run's budgets (checked before each turn by `enforce`)."""
    usage = state.setdefault("usage", no_usage())
    usage["steps"] += steps
    usage["seconds"] = round(usage["seconds"] + seconds, 3)
    usage["tokens"] += tokens


def enforce(state: dict[str, Any], settings: Settings) -> None:
    """BudgetExceeded once a budget is used up; a state without one gets the settings' (runs older than budgets)."""
    usage = state.setdefault("usage", no_usage())
    budget = state.setdefault("budget", from_settings(settings))
    for name, unit, code in _BUDGETS:
        if usage[name] >= budget[name]:
            raise BudgetExceeded(code, f"budget exceeded: used {usage[name]:g} of {budget[name]:g} {unit}")


def within(state: dict[str, Any], settings: Settings) -> bool:
    """Whether `enforce` would let the next turn through."""
    try:
        enforce(state, settings)
    except BudgetExceeded:
        return False
    return True
