"""Why a decision cannot be taken: each refusal's stable word (`code`), which every channel reports as it is."""

from __future__ import annotations

from core.formatting import isoformat
from review.decision_records import DecisionRecord


class DecisionError(Exception):
    """The decision cannot be taken; `code` says why in a stable word."""

    code = "decision_refused"


class AlreadyDecided(DecisionError):
    code = "already_decided"

    def __init__(self, record: DecisionRecord) -> None:
        self.record = record
        done = {"approve": "approved", "reject": "rejected", "cancel": "cancelled"}.get(record.decision, "decided")
        # Attempt 1 keeps the message every channel showed before revisions existed.
        which = f" (attempt {record.attempt})" if record.attempt > 1 else ""
        super().__init__(f"already {done} by {record.by} via {record.via} at {isoformat(record.at)}{which}")


class NotAwaitingReview(DecisionError):
    code = "checkpoint_not_awaiting_review"


class UnknownCheckpoint(DecisionError):
    code = "not_found"


class NotReviewer(DecisionError):
    """The person is not the one who may decide this attempt now (review/access.py's rule)."""

    code = "not_assigned_reviewer"


class ExecutionNotWaiting(DecisionError):
    """The checkpoint waits, but its execution has ended (cancelled or failed) in the meantime."""

    code = "execution_not_awaiting_review"


class InvalidInput(DecisionError):
    """The decision itself is malformed: `pointer` names the part (`/comment`, `/editedArgs/subject`), as a
    JSON Pointer into the API's body; every channel says which field of its own form that is."""

    code = "invalid_decision"

    def __init__(self, pointer: str, detail: str) -> None:
        super().__init__(f"{pointer.rsplit('/', 1)[-1]} {detail}")
        self.pointer = pointer
        self.detail = detail
        # The argument's name for an edit, else "" (a form shows the error beside that argument's field).
        self.argument = pointer.removeprefix("/editedArgs/") if pointer.startswith("/editedArgs/") else ""
