"""What a person sends with a decision, checked: a grade (rating and labels) and edits of the action's arguments."""

from __future__ import annotations

import json
from typing import Any

from core.tool_args import TOOL_PARAMETERS, argument_problems, from_text
from review.decision_errors import InvalidInput

REJECT_NEEDS_COMMENT = "is required to reject: say what should change"
MAX_LABELS = 20
MAX_LABEL = 50


def checked_grade(rating: Any, labels: Any) -> tuple[int | None, list[str] | None]:
    """A decision's optional rating (a whole number 1-5) and labels (distinct short texts, order kept), or
    InvalidInput naming the field. Forms send text: "4" is 4, and labels may come comma-separated."""
    if isinstance(rating, str):
        rating = int(rating) if rating.strip().isdigit() else (None if not rating.strip() else rating)
    if rating is not None and (not isinstance(rating, int) or isinstance(rating, bool) or not 1 <= rating <= 5):
        raise InvalidInput("/rating", "must be a whole number from 1 to 5")
    if isinstance(labels, str):
        labels = [part for part in labels.split(",")]
    if labels is None:
        return rating, None
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise InvalidInput("/labels", "must be a list of texts")
    kept: list[str] = []
    for label in (label.strip() for label in labels):
        if not label:
            continue
        if len(label) > MAX_LABEL or any(ord(c) < 32 for c in label):
            raise InvalidInput("/labels", f"must each be one line of at most {MAX_LABEL} characters")
        if label not in kept:
            kept.append(label)
    if len(kept) > MAX_LABELS:
        raise InvalidInput("/labels", f"may hold at most {MAX_LABELS} labels")
    return rating, kept or None


def checked_edits(next_action: dict[str, Any] | None, edited: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The proposed arguments and the reviewer's changes to them (only those that differ), or InvalidInput
    naming the first argument that is not valid. The whole resulting set is checked against the tool's
    schema (core/tool_args.py), so an edit cannot make a call the tool would refuse."""
    if not next_action or not next_action.get("editable"):
        raise InvalidInput("/editedArgs", "cannot be given here: this checkpoint's action is not a tool call to edit")
    tool, original = str(next_action.get("tool")), dict(next_action.get("args") or {})
    if next_action.get("external"):
        # An external agent's own tool: its schema is the agent's, which checks the edited call itself. A form
        # sends text: an argument proposed as a number, a list or an object is read back as JSON where it parses.
        edited = {name: _as_proposed(original.get(name, _MISSING), value) for name, value in edited.items()}
        return original, {name: value for name, value in edited.items() if original.get(name, _MISSING) != value}
    if tool not in TOOL_PARAMETERS:
        raise InvalidInput("/editedArgs", f"cannot be given here: {tool} takes no arguments a reviewer can edit")
    # Forms and command lines send text: a number argument's text counts as its number.
    edited = {name: from_text(tool, name, value) if isinstance(value, str) else value for name, value in edited.items()}
    changed = {name: value for name, value in edited.items() if original.get(name, _MISSING) != value}
    for problem in argument_problems(tool, {**original, **edited}):
        if problem.name in edited or not problem.name:
            raise InvalidInput(f"/editedArgs/{problem.name}".rstrip("/"), problem.detail)
    return original, changed


_MISSING = object()


def _as_proposed(proposed: Any, value: Any) -> Any:
    if not isinstance(value, str) or proposed is _MISSING or isinstance(proposed, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value
