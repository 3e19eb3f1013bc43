"""Running the installed `vouch` command as operators do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from core.settings import Settings
from tests.support.waiting import until

VOUCH = str(Path(sys.executable).parent / "vouch")
# How long a `vouch` process may take to come up (listening, or logging " started"): a start imports the whole
# service, and on a loaded 2-core machine running the suite on several workers, three processes starting at once
# took over 30 s. A deadline for what must happen, not a measurement: a process that dies fails at once.
START_TIMEOUT = 60.0


def vouch_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOUCH_")}
    env.update(
        VOUCH_DATA_DIR=str(settings.data_dir),
        VOUCH_DATABASE_URL=settings.database_url,
        VOUCH_SECRET_KEY=settings.secret_key.decode(),
        **extra,
    )
    return env


def run_vouch(
    settings: Settings, *args: str, stdin: str | None = None, **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [VOUCH, *args],
        env=vouch_env(settings, **extra),
        # With no input, an empty pipe rather than the test runner's standard input: `vouch users create` asks
        # for a password when its standard input is a terminal.
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=60,
    )


@contextmanager
def running(
    args: list[str], env: dict[str, str], log_path: Path, *, cwd: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A process logging to `log_path`; stopped with SIGTERM on exit if still alive."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=log, cwd=cwd)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@contextmanager
def running_worker(settings: Settings, name: str = "worker", **extra: str) -> Iterator[subprocess.Popen[bytes]]:
    """A `vouch worker` process, its log in the data dir."""
    with running([VOUCH, "worker"], vouch_env(settings, **extra), settings.data_dir / f"{name}.log") as proc:
        yield proc


async def wait_until_healthy(base: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    """Until `base` answers /healthz; fails at once, with the process's log, if the process died."""

    async def healthy() -> bool | None:
        assert proc.poll() is None, log_path.read_text()
        try:
            async with httpx.AsyncClient() as client:
                return True if (await client.get(f"{base}/healthz")).status_code == 200 else None
        except httpx.TransportError:
            return None

    await until(healthy, timeout=START_TIMEOUT)
