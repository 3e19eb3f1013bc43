"""The benchmarks never rot: `python -m bench --quick` runs every figure on each selected backend.

No threshold is asserted here (CI machines vary); the figures themselves live in bench/README.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.__main__ import FIGURES
from tests.support.databases import PG_ADMIN_DSN, selected_backends

ROOT = Path(__file__).resolve().parents[2]


def test_every_figure_prints_its_line_in_quick_mode() -> None:
    backends = selected_backends()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOUCH_")}
    env["VOUCH_BENCH_PG_DSN"] = PG_ADMIN_DSN
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--backends", ",".join(backends)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    for backend in backends:
        for name in FIGURES:
            assert f"FIGURE {name} [{backend}] " in done.stdout, (name, backend, done.stdout[-4000:])
