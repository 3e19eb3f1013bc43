"""Tools the agent calls, each declaring whether it acts on the world.

A tool runs in two phases so that a resumed execution never repeats an effect:
`perform` does slow or outside work with no transaction open; `record` writes the
effect and result inside the step's transaction, together with the step's progress.
Effects that live in our own database (the mail outbox, the workspace) are therefore
exactly-once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.mail import enqueue_mail
from core.models import ToolCall, WorkspaceFile, utcnow
from core.settings import Settings


@dataclass
class ToolContext:
    session: AsyncSession
    settings: Settings
    execution_id: str
    tool_call_id: str
    started_at: datetime


class Tool:
    name: ClassVar[str]
    acts_on_world: ClassVar[bool] = False

    async def perform(self, args: dict[str, Any], started_at: datetime) -> Any:
        """Work done outside any transaction; must be safe to redo after a crash."""
        return None

    async def record(self, ctx: ToolContext, args: dict[str, Any], outcome: Any) -> dict[str, Any]:
        raise NotImplementedError


class SendEmail(Tool):
    name = "send_email"
    acts_on_world = True

    async def record(self, ctx: ToolContext, args: dict[str, Any], outcome: Any) -> dict[str, Any]:
        message = await enqueue_mail(
            ctx.session,
            message_key=f"tool:{ctx.tool_call_id}",
            sender=ctx.settings.mail_from,
            recipient=str(args["to"]),
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

    async def record(self, ctx: ToolContext, args: dict[str, Any], outcome: Any) -> dict[str, Any]:
        path, content = str(args["path"]), str(args["content"])
        existing = await ctx.session.get(WorkspaceFile, (ctx.execution_id, path))
        if existing is None:
            ctx.session.add(WorkspaceFile(execution_id=ctx.execution_id, path=path, content=content))
        else:
            existing.content, existing.updated_at = content, utcnow()
        return {"path": path, "bytes": len(content.encode())}


class Summarise(Tool):
    name = "summarise"

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

    async def perform(self, args: dict[str, Any], started_at: datetime) -> Any:
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
    return f"ran {tool}"


TOOLS: dict[str, Tool] = {tool.name: tool for tool in (SendEmail(), WriteFile(), Summarise(), Wait())}
