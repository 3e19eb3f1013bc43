"""What the pydantic-ai and Inspect adapter tests share: a real Vouch on a free port, and a reviewer who
follows the execution's live events (the chat's Socket.IO stream) and decides each checkpoint as it starts
waiting, through the API's decision route."""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from vouch_client import Client
from vouch_client.models import Event

from core.settings import Settings
from tests.client.conftest import OWNER, Vouch, accounts
from tests.support.live import live_server


@contextmanager
def running_vouch(settings: Settings) -> Iterator[Vouch]:
    """Web app and worker under uvicorn; the owner's key drives the agent's run and reviews it."""
    settings = settings.with_changes(base_url=None)
    owner = accounts(settings, (OWNER, ("eval:manage",)))[0]
    with live_server(settings, run_worker=True) as base:
        yield Vouch(base, settings, owner)


def external_task(name: str) -> dict[str, Any]:
    return {"taskName": name, "taskDescription": "Mail the v2 note to the team.", "assignedReviewer": OWNER}


@dataclass
class Reviewer:
    """Decides the execution's checkpoints in the order they start waiting, one decision each."""

    vouch: Vouch
    execution_id: str
    decisions: list[Mapping[str, Any]]
    decided: list[dict[str, Any]] = field(default_factory=list)
    failure: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._review, name="reviewer", daemon=True)
        self.thread.start()

    def _review(self) -> None:
        try:
            with Client(self.vouch.base, self.vouch.owner.key) as reviewer:
                # Closed before the client is: the stream's last step runs on the client's loop.
                events = cast(Generator[Event, None, None], reviewer.stream(self.execution_id))
                with closing(events):
                    self._decide_each(reviewer, events)
        except BaseException as exc:  # surfaced by finish() in the test's thread
            self.failure.append(exc)

    def _decide_each(self, reviewer: Client, events: Iterator[Event]) -> None:
        waiting = iter(self.decisions)
        for event in events:
            if event.type != "checkpoint.awaiting_review":
                continue
            decision = next(waiting)
            checkpoint_id = event.payload["checkpointId"]
            reviewer.decide(self.execution_id, checkpoint_id, **decision)
            self.decided.append({"checkpointId": checkpoint_id, **event.payload, **decision})
            if len(self.decided) == len(self.decisions):
                return

    def finish(self) -> list[dict[str, Any]]:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the reviewer is still waiting for a checkpoint"
        if self.failure:
            raise self.failure[0]
        return self.decided


def review(vouch: Vouch, execution_id: str, *decisions: Mapping[str, Any]) -> Reviewer:
    return Reviewer(vouch, execution_id, list(decisions))
