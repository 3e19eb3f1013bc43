from tests.conftest import Service, bearer


async def test_create_and_status(service: Service) -> None:
    acct = await service.account("a@example.com")
    r = await service.client.post(
        "/api/eval/create-task-agent",
        json={"taskName": "t", "taskDescription": "Write a note saying hi.", "testMode": "without-verification"},
        headers=bearer(acct.key),
    )
    assert r.status_code == 201, await r.get_json()
