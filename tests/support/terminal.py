"""A real terminal for tests: a tmux server of our own (its socket in the test's tmp_path), one 160x40 window."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.waiting import until


class Terminal:
    def __init__(self, socket: Path) -> None:
        self.socket = str(socket)

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-S", self.socket, *args], check=True, capture_output=True, text=True, timeout=10
        ).stdout

    def screen(self, window: str = "watch") -> str:
        return self.tmux("capture-pane", "-p", "-t", window, "-S", "-200")

    def shows(self, *texts: str, timeout: float = 30, window: str = "watch") -> str:
        async def check() -> str | None:
            screen = self.screen(window)
            return screen if all(text in screen for text in texts) else None

        try:
            return asyncio.run(until(check, timeout=timeout))
        except AssertionError:
            raise AssertionError(f"never showed {texts}; the screen:\n{self.screen(window)}") from None


@contextmanager
def tmux_terminal(tmp_path: Path) -> Iterator[Terminal]:
    assert shutil.which("tmux"), "tmux is needed (apt-get install tmux; .ci/run installs it)"
    made = Terminal(tmp_path / "tmux.sock")
    try:
        yield made
    finally:
        subprocess.run(["tmux", "-S", made.socket, "kill-server"], capture_output=True, timeout=10)
