"""The smallest round trip: create a task, read its status, and see the run finish there."""

from tests.api.helpers import get_status, has_status, wait_for
from tests.conftest import Service, bearer


async def test_create_and_status(service: Service) -> None:
    acct = await service.account("a@example.com")
    r = await service.client.post(
        "/api/eval/create-task-agent",
        json={"taskName": "t", "taskDescription": "Write a note saying hi.", "testMode": "without-verification"},
        headers=bearer(acct.key),
    )
    created = await r.get_json()
    assert r.status_code == 201, created
    execution_id = created["executionId"]

    # Read at once: the record of this run, in whichever early state the in-process worker has got it to.
    record = await get_status(service, acct.key, execution_id)
    assert record["success"] is True
    assert (record["executionId"], record["taskName"], record["testMode"]) == (
        execution_id,
        "t",
        "without-verification",
    )
    assert record["status"] in ("queued", "running", "completed"), record

    finished = await wait_for(service, acct.key, execution_id, has_status("completed"))
    assert finished["executionId"] == execution_id
    assert finished["error"] is None and finished["completedAt"] is not None
    assert finished["result"]["summary"], finished
