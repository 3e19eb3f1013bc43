"""The agent tools' argument schemas, and the check a reviewer's edited arguments pass before a tool runs with them.

Declared here, in the kernel, because two layers need them: the agent's tools (agents/tools.py) offer them to a
model and run with them, and the review layer (review/decisions.py) validates a reviewer's edits, and the review
layer may not import agents. agents/tools.py takes its `parameters` from `TOOL_PARAMETERS`, so there is one
declaration of each tool's arguments.

The validator knows the small part of JSON Schema these schemas use (object, string, number, enum, minimum,
maximum, required, additionalProperties false) plus the rules that are not schema (one recipient, a one-line
subject: core/headers.py, the same rules `send_email` applies when it runs).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from core.headers import line_break_problem, one_recipient


def schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


TOOL_PARAMETERS: dict[str, dict[str, Any]] = {
    "send_email": schema(
        {
            "to": {"type": "string", "description": "one recipient address (a list is refused)"},
            "subject": {"type": "string", "description": "one line"},
            "body": {"type": "string", "description": "plain text"},
        },
        ["to", "subject", "body"],
    ),
    "http_request": schema(
        {
            "method": {"type": "string", "enum": ["GET", "POST"]},
            "url": {"type": "string", "description": "http:// or https:// URL"},
            "body": {"type": "string", "description": "request body for POST"},
            "contentType": {"type": "string", "description": "Content-Type of the body (default application/json)"},
        },
        ["method", "url"],
    ),
    "write_file": schema({"path": {"type": "string"}, "content": {"type": "string"}}, ["path", "content"]),
    "read_file": schema({"path": {"type": "string"}}, ["path"]),
    "list_files": schema({}, []),
    "summarise": schema({}, []),
    "wait": schema({"seconds": {"type": "number", "minimum": 0, "maximum": 300}}, ["seconds"]),
}


@dataclass(frozen=True)
class ArgumentProblem:
    """One argument that is not valid: its name ("" for the arguments as a whole) and why."""

    name: str
    detail: str


def _value_problem(spec: dict[str, Any], value: Any) -> str | None:
    kind = spec.get("type")
    if kind == "string" and not isinstance(value, str):
        return "must be text"
    if isinstance(value, str) and "\x00" in value:
        return "must not contain the NUL character (U+0000)"
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return "must be a number"
        if "minimum" in spec and value < spec["minimum"]:
            return f"must be at least {spec['minimum']}"
        if "maximum" in spec and value > spec["maximum"]:
            return f"must be at most {spec['maximum']}"
    if "enum" in spec and value not in spec["enum"]:
        return "must be one of " + ", ".join(map(str, spec["enum"]))
    return None


def _rule_problems(tool: str, args: dict[str, Any]) -> list[ArgumentProblem]:
    if tool != "send_email":
        return []
    problems = []
    if isinstance(args.get("to"), str):
        try:
            one_recipient(args["to"])
        except ValueError as exc:
            problems.append(ArgumentProblem("to", f"must be exactly one e-mail address: {exc}"))
    if isinstance(args.get("subject"), str) and (found := line_break_problem(args["subject"])) is not None:
        problems.append(ArgumentProblem("subject", found))
    return problems


def argument_problems(tool: str, args: dict[str, Any]) -> list[ArgumentProblem]:
    """Why `args` are not valid arguments of `tool`, one problem per argument; empty when they are."""
    parameters = TOOL_PARAMETERS.get(tool)
    if parameters is None:
        return [ArgumentProblem("", f"{tool} takes no arguments a reviewer can edit")]
    properties: dict[str, Any] = parameters["properties"]
    problems = [ArgumentProblem(name, f"is not an argument of {tool}") for name in args if name not in properties]
    problems += [ArgumentProblem(name, "is required") for name in parameters["required"] if name not in args]
    for name, value in args.items():
        if name in properties and (found := _value_problem(properties[name], value)) is not None:
            problems.append(ArgumentProblem(name, found))
    return problems or _rule_problems(tool, args)


def from_text(tool: str, name: str, text: str) -> Any:
    """A value typed into a form or on a command line, as the argument's type: text stays text, a number
    argument's text becomes its number (left as text when it is none: the validator then says so)."""
    spec = TOOL_PARAMETERS.get(tool, {}).get("properties", {}).get(name, {})
    if spec.get("type") == "number":
        try:
            number = float(text.strip())
        except ValueError:
            return text
        return int(number) if number.is_integer() else number
    return text


def argument_text(value: Any) -> str:
    """An argument as a reviewer reads and edits it: text as it is (line breaks and all), anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def argument_lines(args: dict[str, Any]) -> list[tuple[str, str]]:
    """Each argument of a proposed call as (name, text), in full: what every review surface shows (the chat
    card, the inbox page, the review mail, its link page; static/js/chat-view.js says the same)."""
    return [(str(name), argument_text(value)) for name, value in args.items()]
