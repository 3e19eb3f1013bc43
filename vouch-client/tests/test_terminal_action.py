"""`vouch tasks watch`'s line for a checkpoint: the proposed call's tool and every argument, in full."""

from __future__ import annotations

from vouch_client.models import Event
from vouch_client.terminal import describe


def test_a_checkpoint_line_lists_every_argument_in_full_with_long_values_indented() -> None:
    body = "Dear team,\n" + "figures " * 100 + "\nRegards"
    event = Event(
        executionId="exe",
        seq=4,
        type="checkpoint.awaiting_review",
        payload={
            "stage": "Before sending e-mail",
            "verificationQuestion": "Send it?",
            "readsComments": False,
            "nextAction": {
                "tool": "send_email",
                "instruction": "send the report",
                "args": {"to": "a@example.com", "subject": "Report", "body": body, "count": 3},
                "editable": True,
            },
        },
    )
    assert describe(event) == "\n".join(
        [
            "? Checkpoint Before sending e-mail: Send it?",
            "  next: send_email (send the report)",
            "    to: a@example.com",
            "    subject: Report",
            "    body: Dear team,",
            "      " + "figures " * 100,
            "      Regards",
            "    count: 3",
            "  (approve with changed arguments: vouch checkpoints decide … approve --set name=value)",
            "  This agent cannot read comments: a rejection ends the run.",
        ]
    )


def _decided(decision: str) -> Event:
    payload = {"decision": decision, "by": "rev@example.com", "via": "chat", "comment": "why"}
    return Event(executionId="exe", seq=5, type="checkpoint.decided", payload=payload)


def test_a_rejection_is_marked_with_a_cross_and_an_approval_with_a_tick() -> None:
    assert describe(_decided("reject")) == "✘ rejected by rev@example.com via chat: why"
    assert describe(_decided("approve")) == "✔ approved by rev@example.com via chat: why"
