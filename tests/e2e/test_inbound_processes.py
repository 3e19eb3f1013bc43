"""Two `vouch worker` processes on one host with the same VOUCH_INBOUND_SMTP: the first listens, the second
says once that it runs without the listener, and works."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

from core.db import Database
from core.settings import Settings
from tests.agents.test_runner import new_execution as new_agent_execution
from tests.agents.test_runner import snapshot
from tests.support.ports import free_port
from tests.support.processes import START_TIMEOUT, running_worker
from tests.support.waiting import until

LISTENING = "inbound review mail listener on"
TAKEN = "runs without the inbound review mail listener"


def logged(proc: subprocess.Popen[bytes], path: Path, text: str) -> Callable[[], Awaitable[str | None]]:
    """For `until`: the process's log once it holds `text`; fails at once, with the log, if the process died."""

    async def check() -> str | None:
        content = path.read_text() if path.exists() else ""
        assert proc.poll() is None, content
        return content if text in content else None

    return check


async def test_a_second_worker_on_the_same_inbound_port_runs_without_the_listener(
    db: Database, settings: Settings
) -> None:
    address = f"127.0.0.1:{free_port()}"
    extra = {"VOUCH_INBOUND_SMTP": address, "VOUCH_WORKER_POLL_SECONDS": "0.2"}
    first_log, second_log = settings.data_dir / "first.log", settings.data_dir / "second.log"
    with running_worker(settings, "first", **extra) as first:
        await until(logged(first, first_log, " started"), timeout=START_TIMEOUT)
        assert LISTENING in first_log.read_text()
        with running_worker(settings, "second", **extra) as second:
            text = await until(logged(second, second_log, " started"), timeout=START_TIMEOUT)
            warned = [line for line in text.splitlines() if TAKEN in line]
            assert len(warned) == 1 and "WARNING" in warned[0] and address in warned[0], text
            assert LISTENING not in text
            # The first goes; the second alone claims and runs what comes next.
            first.send_signal(signal.SIGTERM)
            assert first.wait(timeout=15) == 0
            execution_id = await new_agent_execution(db, settings, 'Write a note called "a.md" saying "hi".')

            async def finished() -> str | None:
                status = (await snapshot(db, execution_id)).execution.status
                return status if status in ("completed", "failed") else None

            assert await until(finished, timeout=30) == "completed"
            assert second.poll() is None
