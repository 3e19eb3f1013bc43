"""Colour in a real terminal (tmux), and never where NO_COLOR says no; `tasks list` with headings and columns."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from vouch_client import Client

from tests.client.conftest import Vouch, plain_task, reviewed_task
from tests.client.helpers import status_when_sync
from tests.support.processes import VOUCH
from tests.support.terminal import Terminal, tmux_terminal

GREEN, YELLOW, BOLD = "\x1b[32m", "\x1b[33m", "\x1b[1m"


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    with tmux_terminal(tmp_path) as made:
        yield made


def _list_in(terminal: Terminal, vouch: Vouch, window: str, *env: str) -> str:
    command = (
        f"env TERM=xterm-256color {' '.join(env)} VOUCH_URL={shlex.quote(vouch.base)} "
        f"VOUCH_API_KEY={shlex.quote(vouch.owner.key)} {shlex.quote(VOUCH)} tasks list; echo '[exit '$?']'; exec cat"
    )
    terminal.tmux("new-session", "-d", "-s", window, "-x", "200", "-y", "20", command)
    terminal.shows("[exit 0]", window=window)
    # -e keeps the colours' escape codes in the capture.
    return terminal.tmux("capture-pane", "-p", "-e", "-t", window)


def test_tasks_list_is_coloured_on_a_terminal_and_plain_with_no_color(vouch: Vouch, terminal: Terminal) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        done = client.create_task(plain_task("Finished one")).executionId
        status_when_sync(client, done, "completed")
        waiting = client.create_task(reviewed_task()).executionId
        status_when_sync(client, waiting, "awaiting_review")

    coloured = _list_in(terminal, vouch, "colour")
    assert f"{BOLD}EXECUTION" in coloured
    assert f"{GREEN}completed" in coloured and f"{YELLOW}awaiting_review" in coloured

    plain = _list_in(terminal, vouch, "plain", "NO_COLOR=1")
    assert "\x1b[3" not in plain and "\x1b[1m" not in plain
    lines = [line for line in plain.splitlines() if line.startswith(("EXECUTION", "exe_"))]
    assert lines[0].split() == ["EXECUTION", "STATUS", "CREATED", "TASK"]
    # Aligned: each column starts at the same place on every line, the newest run first.
    assert [line.split()[0] for line in lines[1:]] == [waiting, done]
    for heading in ("STATUS", "CREATED", "TASK"):
        start = lines[0].index(heading)
        assert all(line[start - 2 : start] == "  " and line[start] != " " for line in lines[1:]), heading
