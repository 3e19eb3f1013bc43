"""`python -m bench --peers` reads both sides' lines as they print them and sets each figure against its peer's.

The lines below are the formats of bench/ (approve_resume.py, durable_step.py, chat_fanout.py) and of the peer
scripts of ../shared/peers (langgraph_peer.py, dbos_peer.py, fanout_peer.py), copied from their runs.
"""

from __future__ import annotations

import pytest

from bench.peers import parse_peer, parse_vouch, ratios

VOUCH = """\
FIGURE approve-next-step [postgresql] n=300 p50=9.50 ms p99=15.80 ms max=23.70 ms | decision POST answered n=300 p50=10.40 ms p99=16.80 ms max=20.00 ms | open loop 10/s | goal p99 <= 100 ms (met)
  latency: decision POST sent -> created_at of the worker's first event after the decision (execution.resumed)
  CPU per approval: web 9.0 ms (decision POST), worker 10.6 ms (resume and run to completion: 1 step)
FIGURE approve-resumed-step [postgresql] n=300 p50=12.00 ms p99=20.00 ms max=30.00 ms | CPU per approval, all processes 19.6 ms | open loop 10/s
  latency: decision POST sent -> created_at of the resumed step's record (its tool.result)
FIGURE durable-step-overhead [postgresql] overhead p50=1.41 ms | durable step n=285 p50=1.47 ms p99=2.70 ms max=6.80 ms | in memory n=500 p50=0.05 ms p99=0.11 ms max=0.20 ms | ratio durable/memory p50 27x | goal p50 <= 2 ms (met)
"""  # noqa: E501

LANGGRAPH = """\
langgraph approve postgresql, load average 0.50, 0.40, 0.30
FIGURE approve-next-step [langgraph postgresql] via http: sent -> resumed node's writes n=300 p50=3.40 ms p99=7.10 ms max=9.00 ms | answered n=300 p50=6.00 ms p99=12.00 ms max=14.00 ms | open loop 10/s
  sent -> resumed node's writes committed n=300 p50=3.60 ms p99=7.30 ms max=9.20 ms
  sent -> write_file step's writes (before insert) n=300 p50=5.90 ms p99=12.70 ms max=15.00 ms
  sent -> write_file step's writes committed n=300 p50=6.10 ms p99=12.90 ms max=15.20 ms
  CPU per approval (host process): 5.8 ms
done, load average 0.50, 0.40, 0.30
FIGURE durable-step-overhead [langgraph postgresql] durability=sync: overhead p50=2.30 ms | durable step n=285 p50=2.34 ms p99=4.00 ms max=5.00 ms | in memory (bare, as bench/) n=500 p50=0.04 ms p99=0.10 ms max=0.20 ms | ratio durable/memory p50 58x
  durable step between commits n=285 p50=2.40 ms p99=4.10 ms max=5.10 ms
"""  # noqa: E501

DBOS = """\
FIGURE approve-next-step [dbos postgresql] sent -> recv returned (consumed, recorded) n=300 p50=7.10 ms p99=12.90 ms max=14.00 ms | send answered n=300 p50=3.00 ms p99=5.00 ms max=6.00 ms | open loop 10/s
  sent -> recv's completed_at_epoch_ms (DBOS's stamp, ms) n=300 p50=7.00 ms p99=12.80 ms max=14.00 ms
  sent -> write_file step's end (before its output is recorded) n=300 p50=9.10 ms p99=15.60 ms max=17.00 ms
  sent -> write_file step's output committed n=300 p50=9.30 ms p99=15.80 ms max=17.20 ms
  CPU per approval (worker process): 8.3 ms
FIGURE durable-step-overhead [dbos postgresql async] overhead p50=3.20 ms | durable step n=285 p50=3.23 ms p99=5.00 ms max=6.00 ms | in memory (bare, as bench/) n=500 p50=0.03 ms p99=0.10 ms max=0.20 ms | ratio durable/memory p50 100x
"""  # noqa: E501

FANOUT_VOUCH = """\
  1000 watchers, burst: CPU over 7.0 s: web process 95%, watchers 80%
FIGURE chat-fanout-uncompressed [sqlite] watchers=1000 burst 68,600 deliveries/s | paced 10 events/s commit->receipt n=100000 p50=16.20 ms p99=42.20 ms max=51.00 ms | burst commit->receipt n=300000 p50=900.00 ms p99=2000.00 ms max=2100.00 ms | goal >= 10,000 deliveries/s, paced p99 <= 100 ms (met)
"""  # noqa: E501

FANOUT_NODE = """\
FIGURE chat-fanout [node socket.io deflate=off] watchers=1000 burst 117,000 deliveries/s | paced 10 events/s emit->receipt n=100000 p50=5.00 ms p99=20.00 ms max=25.00 ms | burst emit->receipt n=300000 p50=800.00 ms p99=1500.00 ms max=1600.00 ms
"""  # noqa: E501


def by_metric(vouch: str, peer: str, backend: str) -> dict[str, tuple[float, ...]]:
    return {r.metric: r.values for r in ratios(parse_vouch(vouch, backend), parse_peer(peer))}


def test_approval_step_cpu_and_durable_step_are_set_against_langgraph() -> None:
    found = by_metric(VOUCH, LANGGRAPH, "postgresql")
    assert found["approve-step"] == pytest.approx((12.0 / 5.9, 20.0 / 12.7))
    assert found["cpu"] == pytest.approx((19.6 / 5.8,))
    assert found["durable-step"] == pytest.approx((1.47 / 2.34, 2.70 / 4.00))


def test_dbos_is_timed_to_its_step_s_end_and_its_worker_s_cpu() -> None:
    peer = parse_peer(DBOS)
    assert peer.label == "dbos postgresql"
    found = by_metric(VOUCH, DBOS, "postgresql")
    assert found["approve-step"] == pytest.approx((12.0 / 9.1, 20.0 / 15.6))
    assert found["cpu"] == pytest.approx((19.6 / 8.3,))


def test_uncompressed_fan_out_is_set_against_node_without_compression() -> None:
    found = by_metric(FANOUT_VOUCH, FANOUT_NODE, "sqlite")
    assert found["fanout-plain-1000"] == pytest.approx((68_600 / 117_000,))
    assert found["fanout-plain-1000-paced"] == pytest.approx((16.2 / 5.0, 42.2 / 20.0))
    assert "fanout-deflate-1000" not in found


def test_a_figure_of_another_backend_is_not_taken() -> None:
    assert by_metric(VOUCH, LANGGRAPH, "sqlite") == {}
