"""`vouch serve` as started from a shell: a taken port, the sign-in URL once listening, the clear-text warning."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from core.settings import Settings
from tests.support.ports import free_port
from tests.support.processes import START_TIMEOUT, VOUCH, running, vouch_env, wait_until_healthy
from tests.support.waiting import until


def test_a_taken_port_is_one_line_and_exit_code_1(settings: Settings) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [VOUCH, "serve", "--port", str(port)], env=vouch_env(settings), capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 1
    assert result.stderr == (
        f"Error: port {port} on 127.0.0.1 is already in use (another Vouch?); choose another with --port\n"
    )
    assert result.stdout == ""


async def _log_shows(log: Path, text: str, proc: subprocess.Popen[bytes]) -> str:
    async def check() -> str | None:
        assert proc.poll() is None, log.read_text()
        content = log.read_text()
        return content if text in content else None

    return await until(check, timeout=START_TIMEOUT)


async def test_serve_says_where_to_sign_in_once_it_listens(settings: Settings, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    env = vouch_env(settings.with_changes(base_url=None))
    env.pop("VOUCH_BASE_URL", None)
    with running([VOUCH, "serve", "--port", str(port)], env, log) as proc:
        await wait_until_healthy(f"http://127.0.0.1:{port}", proc, log)
        shown = await _log_shows(log, f"Sign in at http://127.0.0.1:{port}/signin\n", proc)
    assert "in clear text" not in shown  # loopback: cookies as they always were, no warning


async def test_serve_on_all_addresses_over_http_warns_that_sessions_travel_in_clear_text(
    settings: Settings, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    with running([VOUCH, "serve", "--host", "0.0.0.0", "--port", str(port)], vouch_env(settings), log) as proc:
        await wait_until_healthy(f"http://127.0.0.1:{port}", proc, log)
        shown = await _log_shows(log, f":{port}/signin\n", proc)
    warning = next(line for line in shown.splitlines() if line.startswith("Warning:"))
    assert f"http://{socket.gethostname()}:{port} is plain http" in warning
    assert "sessions travel in clear text" in warning and "VOUCH_BASE_URL=https://" in warning
    assert f"Sign in at http://{socket.gethostname()}:{port}/signin" in shown


async def test_serve_with_an_https_base_url_gives_no_warning_and_names_it(settings: Settings, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    env = vouch_env(settings, VOUCH_BASE_URL="https://vouch.example.org")
    with running([VOUCH, "serve", "--host", "0.0.0.0", "--port", str(port)], env, log) as proc:
        await wait_until_healthy(f"http://127.0.0.1:{port}", proc, log)
        shown = await _log_shows(log, "Sign in at https://vouch.example.org/signin\n", proc)
    assert "Warning:" not in shown
