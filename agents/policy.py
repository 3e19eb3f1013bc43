"""Checkpoint policy: which side effects a task names, and which tool calls need a human first.

Detection reads the task description before the run (no model involved: the same text always yields
the same checkpoints, and a caller can predict them). Enforcement is in the runner, at the moment a
tool that acts on the world is about to run: whatever the model writes, the call waits for review.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunMode:
    # testMode without-verification: every checkpoint is recorded auto-approved and nothing pauses.
    without_verification: bool
    # autoDetectCheckpoints: every call of a tool that acts on the world is reviewed before it runs.
    gate_actions: bool


@dataclass(frozen=True)
class SideEffect:
    kind: str
    stage: str
    description: str
    question: str
    pattern: re.Pattern[str]


def _words(*stems: str) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(stems) + r")", re.IGNORECASE)


# Ordered as they are offered to the reviewer. Stems match inflections ("send", "sends", "sending").
SIDE_EFFECTS: tuple[SideEffect, ...] = (
    SideEffect(
        "email",
        "Before sending e-mail",
        "The task asks the agent to send e-mail.",
        "Is this e-mail (recipient, subject and text) right to send?",
        _words(r"e-?mail", r"mail(?:s|ed|ing)?\b", r"send", r"sent\b", r"newsletter", r"notify"),
    ),
    SideEffect(
        "external_call",
        "Before calling an external service",
        "The task asks the agent to call an external service.",
        "May the agent make this request to an outside service?",
        _words(
            r"https?://", r"\bapi\b", r"webhook", r"endpoint", r"http", r"\bcall(?:s|ed|ing)?\b", r"fetch", r"upload"
        ),
    ),
    SideEffect(
        "deletion",
        "Before deleting",
        "The task asks the agent to delete or remove something.",
        "May the agent delete this?",
        _words(r"delet", r"remov", r"eras", r"purg", r"drop\b", r"wipe"),
    ),
    SideEffect(
        "payment",
        "Before paying",
        "The task asks the agent to pay, charge or refund money.",
        "May the agent make this payment?",
        _words(r"pay", r"charg", r"refund", r"purchas", r"invoice", r"transfer"),
    ),
    SideEffect(
        "publication",
        "Before publishing",
        "The task asks the agent to publish or post something publicly.",
        "May the agent publish this?",
        _words(r"publish", r"tweet", r"deploy", r"release", r"announc", r"post(?:s|ed|ing)?\b"),
    ),
)
_BY_KIND = {effect.kind: effect for effect in SIDE_EFFECTS}


def detect_side_effects(description: str) -> list[SideEffect]:
    """The side effects a task description names, each once, in SIDE_EFFECTS order."""
    return [effect for effect in SIDE_EFFECTS if effect.pattern.search(description)]


def side_effect_of(tool: str, args: dict[str, Any]) -> SideEffect | None:
    """The side effect a call of `tool` would have, or None for a tool that does not act on the world."""
    if tool == "send_email":
        return _BY_KIND["email"]
    if tool == "http_request":
        return _BY_KIND["deletion"] if str(args.get("method", "GET")).upper() == "DELETE" else _BY_KIND["external_call"]
    return None


def describe_call(tool: str, args: dict[str, Any]) -> str:
    """One line a reviewer reads: the exact tool and the arguments that matter."""
    if tool == "send_email":
        return f"send an e-mail to {args.get('to')!s} with subject {args.get('subject')!r}"
    if tool == "http_request":
        return f"{str(args.get('method', 'GET')).upper()} {args.get('url')!s}"
    return f"call {tool}"
