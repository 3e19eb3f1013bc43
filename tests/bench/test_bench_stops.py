"""A bench stopped from outside (`timeout`, the peers' runner) stops the service processes it started."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import peers
from bench.common import stack


async def test_sigterm_to_the_bench_stops_its_stack_and_removes_what_it_made() -> None:
    seen: dict[str, Any] = {}
    with pytest.raises(asyncio.CancelledError):
        async with stack("sqlite") as st:
            seen["web"], seen["work"] = st.web, st.work
            os.kill(os.getpid(), signal.SIGTERM)  # without the bench's handler this ends the test's process
            await asyncio.Event().wait()  # until the signal cancels this task
    current = asyncio.current_task()
    assert current is not None
    current.uncancel()
    web: subprocess.Popen[bytes] = seen["web"]
    assert web.poll() is not None  # stopped, not left running
    assert not Path(seen["work"]).exists()
    assert not asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)  # the stack took its handler back


def test_a_side_that_runs_out_of_time_is_terminated_so_that_it_can_stop_its_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = tmp_path / "said"
    side = (
        "import signal, sys\n"
        f"signal.signal(signal.SIGTERM, lambda *_: (open({str(said)!r}, 'w').write('terminated'), sys.exit(0)))\n"
        "print('FIGURE first', flush=True)\n"
        "signal.pause()\n"
    )
    monkeypatch.setattr(peers, "RUN_TIMEOUT", 0)
    output = peers.run("a side", [sys.executable, "-c", side], tmp_path)
    assert output == "FIGURE first\n"
    assert said.read_text() == "terminated"  # SIGTERM, which it handled: not SIGKILL
