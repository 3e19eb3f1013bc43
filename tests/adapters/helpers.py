"""The reviewer of the adapters' tests: watches the run live and decides each checkpoint through the API."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from vouch_client import AsyncClient

from tests.client.conftest import OWNER, Vouch


def external_task() -> dict[str, Any]:
    return {"taskName": "Release mail", "taskDescription": "Mail the v2 note to the team.", "assignedReviewer": OWNER}


@dataclass
class Decision:
    decision: str
    comment: str = ""
    edited_args: dict[str, Any] | None = None


@dataclass
class Reviewer:
    """Decides the run's checkpoints in order, each as it starts waiting (seen on the live stream)."""

    vouch: Vouch
    execution_id: str
    decisions: list[Decision]
    asked: list[dict[str, Any]] = field(default_factory=list)

    async def review(self) -> None:
        async with AsyncClient(self.vouch.base, self.vouch.owner.key) as client:
            async for event in client.stream(self.execution_id):
                if event.type != "checkpoint.awaiting_review":
                    continue
                self.asked.append(event.payload)
                decision = self.decisions[len(self.asked) - 1]
                await client.decide(self.execution_id, event.payload["checkpointId"], decision.decision,
                                    comment=decision.comment, edited_args=decision.edited_args)
                if len(self.asked) == len(self.decisions):
                    return

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Review while the block runs; the block's end waits for the reviewer to be done."""
        reviewing = asyncio.create_task(self.review())
        try:
            yield
            await asyncio.wait_for(reviewing, 20)
        finally:
            reviewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reviewing
