"""The service's processes as the bench sees them from outside: the socket a web process serves on, its start,
and what each process costs (memory, CPU, wake-ups), read from /proc."""

from __future__ import annotations

import asyncio
import glob
import os
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from api.cli import listening_socket


def web_listener() -> socket.socket:
    """A listening socket on a free port of 127.0.0.1, for a web process to inherit (`bench.server --fd`)."""
    return listening_socket("127.0.0.1", 0)


def _tail(logs: str, lines: int = 30) -> str:
    found = sorted(glob.glob(logs))
    return "".join(
        f"\n--- {path} (last {lines} lines)\n" + "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
        for path in found
    )


async def web_answers(base: str, processes: Sequence[subprocess.Popen[bytes] | None], logs: str) -> None:
    """Wait (30 s at most) for the web process at `base` to answer its health check; SystemExit with the end of
    `logs` (a glob) if it does not, or if one of `processes` dies meanwhile."""
    async with aiohttp.ClientSession() as client:
        for _ in range(600):
            if any(proc is not None and proc.poll() is not None for proc in processes):
                raise SystemExit(f"a bench process died; see {logs}{_tail(logs)}")
            try:
                async with client.get(f"{base}/healthz") as answer:
                    if answer.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise SystemExit(f"the web process did not start; see {logs}{_tail(logs)}")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_and_wakeups(pid: int) -> tuple[float, int]:
    """CPU seconds on every thread of the process so far (to the nanosecond: /proc's tick of 10 ms is too coarse
    here), and its threads' voluntary context switches."""
    cpu, woken = 0, 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu += int((task / "schedstat").read_text().split()[0])
            status = (task / "status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                woken += int(line.split()[1])
    return cpu / 1e9, woken
