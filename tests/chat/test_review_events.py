"""The chat shows each step of the review ladder and the revise loop (server-side folding)."""

from __future__ import annotations

from typing import Any

from chat.conversation import fold


def message(seq: int, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"seq": seq, "type": type_, "payload": payload, "at": None}


def test_review_steps_fold_into_system_lines() -> None:
    items = fold(
        [
            message(1, "checkpoint.awaiting_review", {"checkpointId": "c", "stage": "S", "attempt": 1}),
            message(2, "review.reminder_sent", {"checkpointId": "c", "attempt": 1, "to": "r@example.com"}),
            message(3, "review.escalated", {"checkpointId": "c", "attempt": 1, "to": "b@example.com"}),
            message(4, "checkpoint.decided", {"checkpointId": "c", "decision": "reject", "via": "web", "attempt": 1}),
            message(5, "checkpoint.revision_requested", {"checkpointId": "c", "attempt": 1, "nextAttempt": 2}),
            message(6, "checkpoint.awaiting_review", {"checkpointId": "c", "stage": "S", "attempt": 2}),
            message(7, "review.deadline_passed", {"checkpointId": "c", "attempt": 2, "policy": "reject"}),
        ]
    )
    assert [(i.kind, i.data.get("text")) for i in items if i.kind == "system"] == [
        ("system", "Reminder sent to r@example.com"),
        ("system", "Escalated to the backup reviewer b@example.com"),
        ("system", "Attempt 1 rejected: the agent revises and asks again (attempt 2)"),
        ("system", "The review deadline passed: reject applies"),
    ]
    cards = [i for i in items if i.kind == "card"]
    assert [c.data["attempt"] for c in cards] == [1, 2]
    assert cards[0].data["decision"]["decision"] == "reject" and cards[1].data["decision"] is None


def test_a_failed_mail_is_a_system_line() -> None:
    # Issue 19: the dispatcher's mail.failed event says which mail did not go out, and why.
    payload = {"messageId": "msg_1", "to": "r@example.com", "subject": "s", "reason": "550 no such mailbox"}
    items = fold([message(1, "mail.failed", payload)])
    assert [(i.kind, i.data.get("text")) for i in items] == [
        ("system", "Mail to r@example.com could not be sent: 550 no such mailbox")
    ]
