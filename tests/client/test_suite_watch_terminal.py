"""`vouch suites run --watch` in a real terminal (tmux): a bar per model redrawn in place, then the table."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from vouch_client import Client

from tests.client.conftest import OWNER, Vouch, reviewed_task
from tests.client.helpers import status_when_sync
from tests.support.processes import VOUCH
from tests.support.terminal import Terminal, tmux_terminal

PASSES = [{"type": "regex", "pattern": "."}]


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    with tmux_terminal(tmp_path) as made:
        yield made


def test_the_bars_redraw_in_place_until_the_table(vouch: Vouch, terminal: Terminal, tmp_path: Path) -> None:
    # With verification the run waits for its reviewer; without, it runs straight through.
    path = tmp_path / "suite.yaml"
    task = reviewed_task(OWNER, scorers=PASSES)
    body = {"name": "Nightly", "models": ["offline"], "testMode": "both", "tasks": [task]}
    path.write_text(yaml.safe_dump(body))
    command = (
        f"env -u NO_COLOR VOUCH_URL={shlex.quote(vouch.base)} VOUCH_API_KEY={shlex.quote(vouch.owner.key)} "
        f"{shlex.quote(VOUCH)} suites run {shlex.quote(str(path))} --watch --min-pass-rate 1; "
        'echo "[exit $?]"; exec cat'
    )
    terminal.tmux("new-session", "-d", "-s", "watch", "-x", "160", "-y", "40", command)
    screen = terminal.shows("1 in progress", "offline (without-verification)  ", "✓ 1")
    lanes = [line for line in screen.splitlines() if line.startswith("offline (")]
    assert len(lanes) == 2, screen
    waiting, done = lanes
    assert waiting.startswith("offline (with-verification)     ") and "0/1" in waiting and "1 running" in waiting
    assert "▒" * 30 in waiting  # the whole bar is the one run in progress
    assert done.startswith("offline (without-verification)  ") and "1/1" in done and "█" * 30 in done
    # Colour on a terminal: the passed run's bar is green.
    coloured = terminal.tmux("capture-pane", "-p", "-e", "-t", "watch")
    assert "\x1b[32m" + "█" * 30 in coloured, coloured

    suite_id = screen.split("/suites/")[1].split()[0]
    with Client(vouch.base, vouch.owner.key) as client:
        run = next(r for r in client.iter_suite_runs(suite_id) if r.testMode == "with-verification")
        assert run.executionId is not None
        paused = status_when_sync(client, run.executionId, "awaiting_review")
        client.decide(run.executionId, paused.checkpoints[0].checkpointId, "approve")

    screen = terminal.shows("[exit 0]")
    # Redrawn in place: one headline and one bar per lane on the screen, the last drawing's.
    assert screen.count("Suite Nightly [") == 1 and "Suite Nightly [completed] · 2/2 finished" in screen
    assert "[running]" not in screen
    assert len([line for line in screen.splitlines() if line.startswith("offline (")]) == 2
    assert "✓ offline (with-verification): pass rate 100.0% ≥ 100.0%" in screen
    assert "✓ offline (without-verification): pass rate 100.0% ≥ 100.0%" in screen
