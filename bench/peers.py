"""`python -m bench --peers`: Vouch's figures beside its peers', alternating in one run, with each ratio.

The peers are the scripts of `../shared/peers/` (LangGraph, DBOS, Node's socket.io; see their README): each
measures one of bench/'s figures on a system a user could pick instead, by the same method, and prints a `FIGURE`
line in bench/'s format. They run from their own virtualenv (`.venv-peers`, made by `../shared/peers/setup`), never
Vouch's: nothing of theirs is a dependency of Vouch, and CI never needs them. Where they are:

- `VOUCH_PEERS_DIR` (default `<checkout>/../shared/peers`, else `<checkout>/../../shared/peers`);
- `VOUCH_PEERS_PYTHON` (default `<checkout>/.venv-peers/bin/python`);
- `PEER_NODE_MODULES` (default `<checkout>/.peers-node/node_modules`).

Per backend and round: Vouch (`approve-next-step` and `durable-step-overhead`), LangGraph (approve, step), Vouch
again, DBOS (approve, step); then, for fan-out, Vouch's `chat-fanout` and `chat-fanout-uncompressed` between Node's
socket.io with and without compression. Each peer is set against the Vouch run just before it, so the machine's
load of that moment hits both. Each pair prints a `RATIO` line, Vouch ÷ peer, with both sides' p50 / p99:

- approve → the resumed step's record: Vouch's `approve-resumed-step` (POST sent → created_at of the resumed step's
  `tool.result`) against the peer's "write_file step's writes (before insert)" (LangGraph) or "write_file step's end"
  (DBOS); and CPU per approval, all of the service's processes, against the peer's host / worker process;
- durable step: the distance between consecutive step records, p50 / p99;
- fan-out: deliveries/s to 100 and 1,000 watchers (a ratio ≥ 1 is Vouch ahead) and paced p50 / p99.

For latencies and CPU a ratio under 1 is Vouch ahead. A summary table of every ratio closes the run.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from bench.steal import Steal

ROOT = Path(__file__).resolve().parent.parent
# Beside the checkout (../shared/peers), or beside the folder of worktrees it is one of.
_BESIDE = [ROOT.parent / "shared" / "peers", ROOT.parent.parent / "shared" / "peers"]
PEERS_DIR = Path(os.environ.get("VOUCH_PEERS_DIR") or next((str(p) for p in _BESIDE if p.is_dir()), str(_BESIDE[0])))
PEERS_PYTHON = os.environ.get("VOUCH_PEERS_PYTHON", str(ROOT / ".venv-peers" / "bin" / "python"))
NODE_MODULES = os.environ.get("PEER_NODE_MODULES", str(ROOT / ".peers-node" / "node_modules"))
RUN_TIMEOUT = 900
# How long a side stopped early has to stop its own processes before it is killed.
STOP_SECONDS = 60

_SPREAD = r"n=(\d+) p50=([\d.]+) ms p99=([\d.]+) ms"
_FLOAT = r"([\d.,]+)"


@dataclass(frozen=True)
class Spread:
    p50: float
    p99: float


@dataclass
class Figures:
    """What one run printed, by metric: a latency spread, or a single number (CPU ms, deliveries/s)."""

    label: str
    spreads: dict[str, Spread] = field(default_factory=dict)
    numbers: dict[str, float] = field(default_factory=dict)


def _spread_after(text: str, anchor: str) -> Spread | None:
    found = re.search(re.escape(anchor) + r"\s*" + _SPREAD, text)
    return Spread(float(found.group(2)), float(found.group(3))) if found else None


def _number_after(text: str, anchor: str) -> float | None:
    found = re.search(re.escape(anchor) + r"\s*:?\s*" + _FLOAT, text)
    return float(found.group(1).replace(",", "")) if found else None


def _figure_lines(output: str, name: str) -> list[tuple[str, str]]:
    """(label, the line with its indented notes) of each `FIGURE name [label]` line."""
    found = []
    lines = output.splitlines()
    for i, line in enumerate(lines):
        match = re.match(rf"FIGURE {re.escape(name)} \[([^\]]+)\] (.*)", line)
        if match:
            notes = []
            for later in lines[i + 1 :]:
                if not later.startswith("  "):
                    break
                notes.append(later)
            found.append((match.group(1), match.group(2) + "\n" + "\n".join(notes)))
    return found


def parse_vouch(output: str, backend: str) -> Figures:
    figures = Figures(f"vouch {backend}")
    for label, text in _figure_lines(output, "approve-resumed-step"):
        if label == backend:
            figures.spreads["approve-step"] = _spread_after(text, "") or Spread(float("nan"), float("nan"))
            cpu = _number_after(text, "CPU per approval, all processes")
            if cpu is not None:
                figures.numbers["cpu"] = cpu
    for label, text in _figure_lines(output, "durable-step-overhead"):
        if label == backend:
            durable = _spread_after(text, "durable step")
            if durable:
                figures.spreads["durable-step"] = durable
    for name, key in (("chat-fanout", "deflate"), ("chat-fanout-uncompressed", "plain")):
        for label, text in _figure_lines(output, name):
            if label == backend:
                _fanout(figures, text, key)
    return figures


def _fanout(figures: Figures, text: str, key: str) -> None:
    watchers = re.search(r"watchers=(\d+) burst ([\d,]+) deliveries/s", text)
    if not watchers:
        return
    n = watchers.group(1)
    figures.numbers[f"fanout-{key}-{n}"] = float(watchers.group(2).replace(",", ""))
    paced = re.search(r"paced [\d.]+ events/s \S+ " + _SPREAD, text)
    if paced:
        figures.spreads[f"fanout-{key}-{n}-paced"] = Spread(float(paced.group(2)), float(paced.group(3)))


def parse_peer(output: str) -> Figures:
    figures = Figures("?")
    for label, text in _figure_lines(output, "approve-next-step"):
        figures.label = label
        step = _spread_after(text, "sent -> write_file step's writes (before insert)") or _spread_after(
            text, "sent -> write_file step's end (before its output is recorded)"
        )
        if step:
            figures.spreads["approve-step"] = step
        cpu = re.search(r"CPU per approval \([^)]*\): ([\d.]+) ms", text)
        if cpu:
            figures.numbers["cpu"] = float(cpu.group(1))
    for label, text in _figure_lines(output, "durable-step-overhead"):
        figures.label = label.rsplit(" ", 1)[0] if label.startswith("dbos") else label
        durable = _spread_after(text, "durable step")
        if durable:
            figures.spreads["durable-step"] = durable
    for label, text in _figure_lines(output, "chat-fanout"):
        figures.label = label.replace(" deflate=on", "").replace(" deflate=off", "")
        _fanout(figures, text, "deflate" if "deflate=on" in label else "plain")
    return figures


def merged(label: str, parts: list[Figures]) -> Figures:
    out = Figures(label)
    for part in parts:
        out.spreads.update(part.spreads)
        out.numbers.update(part.numbers)
        if part.label != "?":
            out.label = part.label
    return out


METRICS: dict[str, str] = {
    "approve-step": "approve -> the resumed step's record",
    "cpu": "CPU per approval, all processes (ms)",
    "durable-step": "durable step",
    "fanout-deflate-100": "fan-out 100 watchers, compression (deliveries/s)",
    "fanout-deflate-1000": "fan-out 1,000 watchers, compression (deliveries/s)",
    "fanout-plain-100": "fan-out 100 watchers, no compression (deliveries/s)",
    "fanout-plain-1000": "fan-out 1,000 watchers, no compression (deliveries/s)",
    "fanout-deflate-1000-paced": "fan-out 1,000 watchers, compression, paced latency",
    "fanout-plain-1000-paced": "fan-out 1,000 watchers, no compression, paced latency",
}


def _fanout_name(metric: str) -> str:
    """fanout-plain-20-paced -> "fan-out 20 watchers, no compression, paced latency" (the quick run's counts)."""
    parts = metric.split("-")
    if parts[0] != "fanout" or len(parts) < 3:
        return metric
    kind = "compression" if parts[1] == "deflate" else "no compression"
    tail = ", paced latency" if parts[-1] == "paced" else " (deliveries/s)"
    return f"fan-out {parts[2]} watchers, {kind}{tail}"


@dataclass(frozen=True)
class Ratio:
    metric: str
    peer: str
    vouch: tuple[float, ...]
    other: tuple[float, ...]

    @property
    def values(self) -> tuple[float, ...]:
        return tuple(v / o if o else float("nan") for v, o in zip(self.vouch, self.other, strict=True))

    def line(self, backend: str) -> str:
        name = METRICS.get(self.metric) or _fanout_name(self.metric)
        if len(self.vouch) == 2:
            sides = (
                f"p50 {self.vouch[0]:.2f} / {self.other[0]:.2f} = {self.values[0]:.2f}x, "
                f"p99 {self.vouch[1]:.2f} / {self.other[1]:.2f} = {self.values[1]:.2f}x"
            )
        else:
            sides = f"{self.vouch[0]:,.1f} / {self.other[0]:,.1f} = {self.values[0]:.2f}x"
        return f"RATIO {self.metric} [{backend}] vouch / {self.peer}: {sides}  ({name})"


def ratios(vouch: Figures, peer: Figures) -> list[Ratio]:
    out = []
    found = [*vouch.spreads, *vouch.numbers]
    for metric in [m for m in METRICS if m in found] + [m for m in found if m not in METRICS]:
        if metric in vouch.spreads and metric in peer.spreads:
            v, p = vouch.spreads[metric], peer.spreads[metric]
            out.append(Ratio(metric, peer.label, (v.p50, v.p99), (p.p50, p.p99)))
        elif metric in vouch.numbers and metric in peer.numbers:
            out.append(Ratio(metric, peer.label, (vouch.numbers[metric],), (peer.numbers[metric],)))
    return out


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def run(title: str, command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run one side, echoing its figure lines (and their notes) as they come; its whole output."""
    print(f"=== {time.strftime('%H:%M:%S', time.gmtime())} UTC {title} | load average {load_average()}", flush=True)
    steal = Steal()
    proc = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    lines: list[str] = []
    assert proc.stdout is not None
    started = time.monotonic()
    echoing = False
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("FIGURE "):
                echoing = True
            elif not line.startswith("  "):
                echoing = False
            if echoing:
                print("  " + line.rstrip() if not line.startswith("FIGURE ") else line.rstrip(), flush=True)
            if time.monotonic() - started > RUN_TIMEOUT:
                break
    finally:
        # Stopped early (its time is up, or this runner was): a side that holds a stack of service processes
        # stops them on SIGTERM (bench/common.py); SIGKILL would leave them running.
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
    code = proc.wait()
    proc.stdout.close()
    took, stolen = time.monotonic() - started, steal.since_last()
    print(f"    ({took:.0f} s; CPU stolen by the host meanwhile: {stolen})", flush=True)
    output = "".join(lines)
    if code != 0:
        print(f"  ({title} exited {code}; its last lines:)\n" + "".join(lines[-15:]), flush=True)
    return output


def vouch_side(backend: str, figures: str, quick: bool) -> Figures:
    command = [sys.executable, "-m", "bench", "--only", figures, "--backends", backend] + (["--quick"] if quick else [])
    return parse_vouch(run(f"vouch {figures} [{backend}]", command, ROOT), backend)


def peer_side(script: str, args: list[str], quick: bool) -> Figures:
    command = [PEERS_PYTHON, str(PEERS_DIR / script), *args] + (["--quick"] if quick else [])
    env = {**os.environ, "PEER_NODE_MODULES": NODE_MODULES}
    return parse_peer(run(f"{script} {' '.join(args)}", command, PEERS_DIR, env))


def check_peers() -> None:
    if not (PEERS_DIR / "langgraph_peer.py").exists():
        raise SystemExit(f"--peers: no peer scripts at {PEERS_DIR} (set VOUCH_PEERS_DIR)")
    if not Path(PEERS_PYTHON).exists():
        raise SystemExit(f"--peers: no peers' python at {PEERS_PYTHON}: run {PEERS_DIR}/setup from the checkout")


def compare(backends: list[str], rounds: int, quick: bool, parts: set[str]) -> None:
    check_peers()
    print(f"bench --peers: peers at {PEERS_DIR}, their python {PEERS_PYTHON}", flush=True)
    table: list[tuple[str, Ratio]] = []

    def pair(backend: str, vouch: Callable[[], Figures], peer: Callable[[], Figures]) -> None:
        ours, theirs = vouch(), peer()
        for ratio in ratios(ours, theirs):
            print(ratio.line(backend), flush=True)
            table.append((backend, ratio))

    for round_number in range(1, rounds + 1):
        print(f"##### round {round_number}", flush=True)
        for backend in backends:
            if "approve" in parts:
                for peer in ("langgraph_peer.py", "dbos_peer.py"):
                    pair(
                        backend,
                        lambda b=backend: vouch_side(b, "approve-next-step,durable-step-overhead", quick),
                        lambda b=backend, p=peer: merged(
                            "?",
                            [
                                peer_side(p, ["approve", "--backend", b], quick),
                                peer_side(p, ["step", "--backend", b], quick),
                            ],
                        ),
                    )
        if "fanout" in parts:
            for deflate in ("on", "off"):
                figure = "chat-fanout" if deflate == "on" else "chat-fanout-uncompressed"
                pair(
                    "sqlite",
                    lambda f=figure: vouch_side("sqlite", f, quick),
                    lambda d=deflate: peer_side("fanout_peer.py", ["--server", "node", "--deflate", d], quick),
                )
    summary(table)


def summary(table: list[tuple[str, Ratio]]) -> None:
    """Every ratio of the run, by metric, backend and peer: each pair's value, and their median."""
    print("##### ratios, Vouch / peer (under 1: Vouch ahead for latency and CPU; over 1 for deliveries/s)")
    groups: dict[tuple[str, str, str], list[Ratio]] = {}
    for backend, ratio in table:
        groups.setdefault((ratio.metric, backend, ratio.peer), []).append(ratio)
    for (metric, backend, peer), found in groups.items():
        width = len(found[0].values)
        columns = []
        for i, part in enumerate(("p50", "p99")[:width] if width == 2 else ("",)):
            values = [r.values[i] for r in found]
            each = ", ".join(f"{v:.2f}" for v in values)
            columns.append(f"{part + ' ' if part else ''}{statistics.median(values):.2f}x [{each}]")
        name = METRICS.get(metric) or _fanout_name(metric)
        print(f"  {name} [{backend}] vs {peer}: {'; '.join(columns)}", flush=True)


def _exit_on_sigterm(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    from bench.common import backends_of

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", action="store_true")
    parser.add_argument("--quick", action="store_true", help="tiny counts on both sides")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the whole alternation")
    parser.add_argument("--parts", default="approve,fanout", help="comma-separated, of: approve, fanout")
    args = parser.parse_args(argv)
    # A SIGTERM to this runner ends the side under way through `run`'s `finally`, not by leaving it running.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if parts - {"approve", "fanout"}:
        raise SystemExit(f"--parts: unknown {sorted(parts - {'approve', 'fanout'})}")
    print(f"vouch bench --peers {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC; load average {load_average()}")
    compare(backends_of(args), args.rounds, args.quick, parts)
    print(f"finished; load average now {load_average()}", flush=True)
