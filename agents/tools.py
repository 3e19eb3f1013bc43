"""Tools the agent calls, each declaring whether it acts on the world.

A tool runs in two phases so that a resumed execution never repeats an effect:
`perform` does slow or outside work with no transaction open; `record` writes the
effect and result inside the step's transaction, together with the step's progress.
Effects that live in our own database (the mail outbox, the workspace) are therefore
exactly-once.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from agents.http_tool import HttpRequest
from agents.tool_base import SingleWrite, Tool, ToolContext, ToolFailed
from core.events import Companion, write_row
from core.headers import line_break_problem, one_recipient
from core.mail import enqueue_mail
from core.models import WORKSPACE_FILES, ToolCall, WorkspaceFile, utcnow
from core.settings import Settings
from core.tool_args import TOOL_PARAMETERS


class SendEmail(Tool):
    name = "send_email"
    acts_on_world = True
    description = "Send an e-mail. It is queued in the service's outbox and sent once."
    parameters = TOOL_PARAMETERS[name]

    def argument_problem(self, args: dict[str, Any]) -> str | None:
        # Checked before a row is queued: the dispatcher would refuse it anyway, and the model can correct it.
        try:
            one_recipient(str(args.get("to", "")))
        except ValueError as exc:
            return f"`to` must be exactly one e-mail address: {exc}"
        problem = line_break_problem(str(args.get("subject", "")))
        return None if problem is None else f"`subject` {problem}"

    async def record(self, ctx: ToolContext, args: dict[str, Any], outcome: Any) -> dict[str, Any]:
        problem = self.argument_problem(args)
        if problem is not None:
            raise ToolFailed(problem)
        message = await enqueue_mail(
            ctx.session,
            message_key=f"tool:{ctx.tool_call_id}",
            sender=ctx.settings.mail_from,
            # The bare address: a display name adds nothing the reviewer or the dispatcher needs.
            recipient=one_recipient(str(args["to"])),
            subject=str(args["subject"]),
            text_body=str(args["body"]),
            execution_id=ctx.execution_id,
            smtp_configured=ctx.settings.smtp_url is not None,
        )
        return {
            "messageId": message.id,
            "to": message.recipient,
            "subject": message.subject,
            "delivery": message.status,
        }


class WriteFile(Tool):
    name = "write_file"
    description = "Write a text file to this task's workspace (replacing it if it exists)."
    parameters = TOOL_PARAMETERS[name]

    async def record(self, ctx: ToolContext, args: dict[str, Any], outcome: Any) -> dict[str, Any]:
        write = self.single_write(ctx.execution_id, args, utcnow())
        await write_row(ctx.session, write.row)
        return write.result

    def single_write(self, execution_id: str, args: dict[str, Any], now: datetime) -> SingleWrite:
        path, content = str(args["path"]), str(args["content"])
        row = {"execution_id": execution_id, "path": path, "content": content, "updated_at": now}
        # Replacing the file if it exists: the table's key is (execution_id, path).
        result = {"path": path, "bytes": len(content.encode())}
        return SingleWrite(Companion(WORKSPACE_FILES, row, ("execution_id", "path")), result)


class ReadFile(Tool):
    name = "read_file"
    description = "Read a text file from this task's workspace."
    parameters = TOOL_PARAMETERS[name]

    async def record(self, ctx: ToolContext, args: dict[str, Any], outcome: Any) -> dict[str, Any]:
        path = str(args["path"])
        found = await ctx.session.get(WorkspaceFile, (ctx.execution_id, path))
        if found is None:
            raise ToolFailed(f"no file {path!r} in the workspace")
        return {"path": path, "content": found.content}


class ListFiles(Tool):
    name = "list_files"
    description = "List the files in this task's workspace with their sizes."

    async def record(self, ctx: ToolContext, args: dict[str, Any], outcome: Any) -> dict[str, Any]:
        rows = await ctx.session.execute(
            sa.select(WorkspaceFile.path, sa.func.length(WorkspaceFile.content))
            .where(WorkspaceFile.execution_id == ctx.execution_id)
            .order_by(WorkspaceFile.path)
        )
        return {"files": [{"path": path, "chars": size} for path, size in rows.all()]}


class Summarise(Tool):
    name = "summarise"
    description = "Summarise what has been done so far."

    async def record(self, ctx: ToolContext, args: dict[str, Any], outcome: Any) -> dict[str, Any]:
        done = await ctx.session.scalars(
            sa.select(ToolCall)
            .where(ToolCall.execution_id == ctx.execution_id, ToolCall.status == "succeeded")
            .order_by(ToolCall.step_index)
        )
        lines = [describe_result(call.tool, call.result or {}) for call in done]
        summary = "Nothing has been done yet." if not lines else "So far: " + "; ".join(lines) + "."
        return {"summary": summary}


class Wait(Tool):
    name = "wait"
    performs_outside = True
    description = "Wait a number of seconds (at most 300)."
    parameters = TOOL_PARAMETERS[name]

    async def perform(self, settings: Settings, args: dict[str, Any], started_at: datetime) -> Any:
        # Measured from the durable start, so a resumed wait only waits what is left.
        remaining = float(args["seconds"]) - (utcnow() - started_at).total_seconds()
        if remaining > 0:
            await asyncio.sleep(remaining)
        return None

    async def record(self, ctx: ToolContext, args: dict[str, Any], outcome: Any) -> dict[str, Any]:
        return {"waitedSeconds": float(args["seconds"])}


def describe_result(tool: str, result: dict[str, Any]) -> str:
    if tool == "send_email":
        return f"sent an e-mail to {result.get('to')} ({result.get('subject')!r})"
    if tool == "write_file":
        return f"wrote {result.get('path')} ({result.get('bytes')} bytes)"
    if tool == "wait":
        return f"waited {result.get('waitedSeconds')} s"
    if tool == "summarise":
        return "summarised the work"
    if tool == "http_request":
        return f"{result.get('method')} {result.get('url')} answered {result.get('status')}"
    if tool == "read_file":
        return f"read {result.get('path')}"
    if tool == "list_files":
        return f"listed {len(result.get('files', []))} file(s)"
    return f"ran {tool}"


TOOLS: dict[str, Tool] = {
    tool.name: tool for tool in (SendEmail(), HttpRequest(), WriteFile(), ReadFile(), ListFiles(), Summarise(), Wait())
}
