"""The typed models: answers read tolerantly (an older client keeps working against a newer server), requests
checked strictly (a misspelt field fails here, before a round trip)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from stub_http import status_record
from vouch_client import Event, StatusRecord, TaskSpec


def test_an_answer_keeps_fields_it_does_not_know() -> None:
    record = StatusRecord.model_validate(status_record(webhook={"url": None, "deliveries": []}, futureField=1))
    assert record.final and record.metrics.steps == 2
    assert record.model_extra == {"webhook": {"url": None, "deliveries": []}, "futureField": 1}


def test_an_error_given_as_plain_text_is_read_as_unclassified() -> None:
    # A server from before error codes answered a string.
    record = StatusRecord.model_validate(status_record(status="failed", error="the tool broke"))
    assert record.error is not None and (record.error.code, record.error.detail) == ("unclassified", "the tool broke")
    coded = StatusRecord.model_validate(
        status_record(status="failed", error={"code": "task_not_understood", "instructions": ["fly"]})
    )
    assert coded.error is not None and str(coded.error) == "task_not_understood: " and coded.error.instructions


def test_the_waiting_checkpoint_is_the_one_awaiting_review() -> None:
    checkpoint = {"checkpointId": "cp_1", "stage": "Send", "verificationQuestion": "Send it?", "status": "pending"}
    waiting = {**checkpoint, "checkpointId": "cp_2", "status": "awaiting_review"}
    record = StatusRecord.model_validate(status_record(status="awaiting_review", checkpoints=[checkpoint, waiting]))
    found = record.waiting_checkpoint()
    assert not record.final and found is not None and found.checkpointId == "cp_2"


def test_a_request_refuses_a_misspelt_field_and_sends_only_what_was_set() -> None:
    with pytest.raises(ValidationError, match="taskNmae"):
        TaskSpec.model_validate({"taskNmae": "x", "taskDescription": "y"})
    spec = TaskSpec.model_validate({"taskName": "x", "taskDescription": "y", "agentModel": "offline"})
    # The server's defaults stay the server's: what the caller left out is not sent.
    assert spec.body() == {"taskName": "x", "taskDescription": "y", "agentModel": "offline"}


def test_an_event_names_the_outcome_it_announces() -> None:
    def event(kind: str) -> Event:
        return Event(executionId="exe_1", seq=1, type=kind)

    assert event("execution.rejected").outcome == "rejected"
    assert event("checkpoint.decided").outcome is None
