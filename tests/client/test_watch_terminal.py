"""`vouch tasks watch` in a real terminal (tmux): the conversation live, and a checkpoint approved in place."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from vouch_client import Client

from tests.client.conftest import Vouch, reviewed_task
from tests.support.processes import VOUCH
from tests.support.terminal import Terminal, tmux_terminal


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    with tmux_terminal(tmp_path) as made:
        yield made


def test_watch_shows_the_run_and_approves_a_checkpoint_in_place(vouch: Vouch, terminal: Terminal) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        execution_id = client.create_task(reviewed_task()).executionId
        command = (
            f"env VOUCH_URL={shlex.quote(vouch.base)} VOUCH_API_KEY={shlex.quote(vouch.owner.key)} "
            f"{shlex.quote(VOUCH)} tasks watch {execution_id}; echo \"[exit $?]\"; exec cat"
        )
        terminal.tmux("new-session", "-d", "-s", "watch", "-x", "160", "-y", "40", command)

        screen = terminal.shows("? Checkpoint Send: Send it?", "[a]pprove, [r]eject <comment>, [s]kip >")
        assert f"Release note ({execution_id})" in screen and "→ write_file" in screen

        terminal.tmux("send-keys", "-t", "watch", "a ship it", "Enter")
        screen = terminal.shows("[exit 0]")
        assert f"✔ approved by {vouch.owner.email} via api: ship it" in screen
        assert "→ send_email" in screen and "■ Completed" in screen
        assert "Result: completed in" in screen and "3 steps" in screen

        final = client.status(execution_id)
        assert final.status == "completed" and final.checkpoints[0].decision is not None
        assert final.checkpoints[0].decision.comment == "ship it"


def test_the_progress_line_shows_state_steps_and_time(vouch: Vouch, terminal: Terminal) -> None:
    with Client(vouch.base, vouch.owner.key) as client:
        execution_id = client.create_task(reviewed_task()).executionId
        command = (
            f"env VOUCH_URL={shlex.quote(vouch.base)} VOUCH_API_KEY={shlex.quote(vouch.owner.key)} "
            f"{shlex.quote(VOUCH)} tasks watch {execution_id} --no-prompt"
        )
        terminal.tmux("new-session", "-d", "-s", "watch", "-x", "160", "-y", "40", command)
        screen = terminal.shows("[waiting for review] 1 steps · 0:0")
        assert "elapsed" in screen
        client.cancel(execution_id)
