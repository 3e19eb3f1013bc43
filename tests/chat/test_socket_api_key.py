"""Watching with an API key (the Python client's way in): eval:read, its own user's executions, checked per join."""

from __future__ import annotations

import pytest
import socketio

from core.accounts import revoke_api_key
from core.db import Database
from core.settings import Settings
from tests.chat.helpers import Watcher, append, new_execution
from tests.conftest import make_account

OWNER = "keyholder@example.com"


async def _watcher(web: str, watchers: list[Watcher], key: str, *, header: bool = True) -> Watcher:
    watcher = Watcher()
    watchers.append(watcher)
    if header:
        await watcher.client.connect(
            web, headers={"Authorization": f"Bearer {key}"}, transports=["websocket"], namespaces=["/chat"],
            wait_timeout=10,
        )  # fmt: skip
    else:
        await watcher.connect(web, auth={"apiKey": key})
    return watcher


@pytest.mark.parametrize("header", [True, False], ids=["bearer-header", "auth-object"])
async def test_a_key_watches_its_own_users_executions_only(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher], header: bool
) -> None:
    account = await make_account(worker_db, chat_settings, OWNER, "eval:read")
    mine = await new_execution(worker_db, chat_settings, owner=OWNER)
    theirs = await new_execution(worker_db, chat_settings)
    watcher = await _watcher(web, watchers, account.key, header=header)
    joined = await watcher.join(mine)
    assert joined["ok"] is True and joined["canDecide"] is False  # a key watches; it decides over the API
    assert [event["type"] for event in joined["events"]] == ["execution.created"]
    assert (await watcher.join(theirs))["error"] == "forbidden"
    (seq,) = await append(worker_db, mine)
    await watcher.until_live(mine, seq)


async def test_a_key_without_eval_read_or_a_made_up_key_is_refused(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    creator = await make_account(worker_db, chat_settings, OWNER, "eval:create")
    for key in (creator.key, "svc_eval_" + "A" * 32):
        watcher = Watcher()
        watchers.append(watcher)
        with pytest.raises(socketio.exceptions.ConnectionError):
            await watcher.connect(web, auth={"apiKey": key})
        assert watcher.refusals == [{"message": "unauthorized"}]


async def test_a_revoked_key_is_refused_at_its_next_join(
    web: str, worker_db: Database, chat_settings: Settings, watchers: list[Watcher]
) -> None:
    account = await make_account(worker_db, chat_settings, OWNER, "eval:manage")
    mine = await new_execution(worker_db, chat_settings, owner=OWNER)
    watcher = await _watcher(web, watchers, account.key)
    assert (await watcher.join(mine))["ok"] is True
    async with worker_db.transaction() as session:
        await revoke_api_key(session, account.key_id)
    assert (await watcher.join(mine))["error"] == "forbidden"
    refused = await watcher.decide(mine, "chk_x", "approve")
    assert refused["ok"] is False
