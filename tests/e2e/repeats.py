"""Which repeated deliveries a chaos run may show: only those a lease that ran out explains.

A mail row (core/mail.py) and a webhook delivery (core/webhook_sender.py) are claimed with a lease; a worker
killed between the receiver's acceptance and its record of it leaves the claim to run out, and the next
claim sends the same message (same Message-ID / webhook-id) again. That next claim can come no sooner than
the lease after the first, so two copies closer together than the lease mean two workers held one claim:
a bug, whatever the kills were."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from itertools import pairwise

# Between a claim and the receiver's answer: a local send on a busy machine, well inside this.
SEND_SLACK = 5.0


@dataclass(frozen=True)
class Row:
    """An outbox row as the database has it after the run."""

    key: str  # what the receiver sees: the Message-ID or the webhook-id
    label: str  # the recipient or URL, for the failure message
    claims: int  # the row's `attempts`: each claim adds one, and a claim sends at most once
    error: str | None = None  # the row's last recorded failure, if any


@dataclass(frozen=True)
class Repeats:
    what: str
    lease: timedelta
    kills: int
    copies: dict[str, list[float]]  # key -> when each copy arrived (time.monotonic()), in order
    rows: dict[str, Row]

    @classmethod
    def of(cls, what: str, lease: timedelta, kills: int, arrivals: Iterable[tuple[str, float]],
           rows: Iterable[Row]) -> Repeats:  # fmt: skip
        copies: dict[str, list[float]] = defaultdict(list)
        for key, at in arrivals:
            copies[key].append(at)
        return cls(what, lease, kills, {k: sorted(v) for k, v in copies.items()}, {r.key: r for r in rows})

    def resends(self) -> int:
        return sum(len(times) - 1 for times in self.copies.values())

    def gaps(self, key: str) -> list[float]:
        times = self.copies[key]
        return [later - earlier for earlier, later in pairwise(times)]

    def leases_run_out(self) -> list[str]:
        """Keys sent again at least a lease after an earlier copy: the lease ran out during the run."""
        floor = self.lease.total_seconds() - SEND_SLACK
        return sorted(k for k in self.copies if any(gap >= floor for gap in self.gaps(k)))

    def unexplained(self) -> list[str]:
        """Keys repeated sooner than a lease allows, or more often than their row was claimed, or unknown."""
        floor = self.lease.total_seconds() - SEND_SLACK
        return sorted(
            key
            for key, times in self.copies.items()
            if key not in self.rows or len(times) > self.rows[key].claims or any(gap < floor for gap in self.gaps(key))
        )

    def reclaimed(self) -> list[str]:
        """Rows the database says were claimed more than once (a lease ran out, or two workers claimed it)."""
        return sorted(key for key, row in self.rows.items() if row.claims > 1)

    def reclaimed_report(self) -> str:
        return ", ".join(
            f"{key} ({self.rows[key].claims} claims, {len(self.copies.get(key, []))} copies"
            + (f", last error {self.rows[key].error!r})" if self.rows[key].error else ")")
            for key in self.reclaimed()
        )

    def report(self) -> str:
        lines = [
            f"{self.what}: {self.kills} kill(s), {self.resends()} resend(s); "
            f"resent after a lease of {self.lease.total_seconds():g} s ran out: {self.leases_run_out()}; "
            f"rows claimed again (a lease ran out, a send failed, or two workers held one claim): "
            f"[{self.reclaimed_report()}]"
        ]
        for key in self.unexplained():
            row = self.rows.get(key)
            gaps = self.gaps(key)
            closest = f"the closest {min(gaps):.3f} s apart" if gaps else "one copy"
            lines.append(
                f"  duplicated without a lease running out: {key} for {row.label if row else '?'}: "
                f"{len(self.copies[key])} copies, {closest}, claimed {row.claims if row else '?'} time(s)"
                + (f", last error {row.error!r}" if row and row.error else "")
            )
        return "\n".join(lines)

    def assert_explained(self) -> None:
        print(self.report())  # shown with -s, and beside any failure: the run's kills and resends
        assert not self.unexplained(), self.report()
