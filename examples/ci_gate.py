"""Run an evaluation task from Python in CI; exit non-zero unless it completes.

    pip install ./vouch-client   # the client alone; a server's install has it too
    VOUCH_URL=https://vouch.example.com VOUCH_API_KEY=svc_eval_… python examples/ci_gate.py
"""

from __future__ import annotations

import sys

from vouch_client import Client, VouchError, WaitTimeout

TASK = {
    "taskName": "Nightly release-note check",
    "taskDescription": 'Write a note called "notes.md" saying "nightly build is green". Then summarise.',
    "testMode": "without-verification",
}


def main() -> int:
    try:
        with Client() as vouch:  # VOUCH_URL and VOUCH_API_KEY
            created = vouch.create_task(TASK)  # retried safely: one Idempotency-Key per create
            print(f"started {created.executionId}; watch it at {created.chatUrl}")
            final = vouch.wait(created.executionId, timeout=1200)
    except WaitTimeout as exc:
        print(f"gave up: {exc}", file=sys.stderr)
        return 4
    except VouchError as exc:  # ApiError subclasses carry .code, .detail and .errors
        print(f"vouch: {exc}", file=sys.stderr)
        return 5
    print(f"{final.status}: {final.metrics.steps} steps in {(final.metrics.durationMs or 0) / 1000:.1f} s")
    if final.result:
        print(final.result.get("summary", ""))
    return 0 if final.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
