"""Mutation checks by hand: each mutant breaks one line of a decision, authorisation, lease, fencing or
exactly-once path, and the tests that should notice run against it. Not part of the suite (it runs the suite's
tests many times over); run it after changing any of these paths:

    .venv/bin/python -m tests.mutants                 # every mutant, on SQLite
    .venv/bin/python -m tests.mutants --only inbox    # mutants whose name contains "inbox"
    VOUCH_TEST_DATABASES=postgresql .venv/bin/python -m tests.mutants

Each mutant is applied to a copy of the work tree in a temporary directory (the tree itself is never
touched), and its tests run there with `-x`. A mutant is *caught* when a test fails, *survived* when all pass,
and *broken* when the tests could not even run (the mutant no longer matches the code: update it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WHO = "tests/review/test_who_may_decide.py"
DECIDE = "tests/review/test_decide.py"
TOKENS = "tests/review/test_mail_tokens.py"
REVISE = "tests/review/test_revise.py"
LINKS = "tests/review/test_email_links.py"
INBOX = "tests/review/test_inbox.py"
SMTP = "tests/review/test_email_smtp.py"
API_DECISION = "tests/api/test_decision.py"
RUNNER = "tests/agents/test_runner.py"
CLAIMS = "tests/agents/test_claims.py"
APPROVED = "tests/agents/test_approved_step.py"
EDITED = "tests/agents/test_edited_approval.py"
MAIL = "tests/core/test_mail.py"
WEBHOOKS = "tests/core/test_webhooks.py"
CHAOS = "tests/e2e/test_chaos.py"
TRACES = "tests/core/test_trace_export.py"
GRADING = "tests/review/test_grading.py"
VERDICTS = "tests/api/test_verdicts.py"


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    before: str  # must occur exactly once in the file
    after: str
    tests: tuple[str, ...]


# Left out as equivalent (no behaviour can tell them apart, so no test can catch them): review/links.py's
# compare-and-set on used_at (decide's compare-and-set on the checkpoint already lets one answer through);
# review/inbound.py's purpose check (only reply tokens are hex, and only hex matches a reply's address or
# subject); review/access.py's `may_decide` asking whether the assigned reviewer is disabled (its callers, the
# inbox and the chat, act for a signed-in person, and a disabled user has no session: `decide` asks again).
MUTANTS = [
    # The one decision function.
    Mutant("decide: the who-may-decide check", "review/decisions.py",
           "    where = [_RULE_ON_ROW] if person else []", "    where = []",
           (DECIDE, WHO)),
    Mutant("decide: compare-and-set on the checkpoint's status", "review/decisions.py",
           "    where = [checkpoints.id == checkpoint_id, checkpoints.status == from_status]",
           "    where = [checkpoints.id == checkpoint_id]", (DECIDE,)),
    Mutant("decide: bound to the attempt answered", "review/decisions.py",
           "        where.append(checkpoints.attempt == attempt)", "        pass", (DECIDE, REVISE)),
    Mutant("decide: only a waiting execution moves on", "review/decisions.py",
           '        EXECUTIONS.c.status == "awaiting_review",\n', "", ("tests/api/test_manage_endpoints.py",)),
    # The rule itself.
    Mutant("rule: the backup only once escalated", "review/access.py",
           "    named = sa.or_(assigned == email, sa.and_(backup == email, escalated))",
           "    named = sa.or_(assigned == email, backup == email)", (DECIDE, WHO)),
    Mutant("rule: a disabled reviewer decides", "review/access.py",
           "    return sa.and_(named, ~_disabled(email))", "    return named", (WHO,)),
    Mutant("rule: may_decide lets anyone in", "review/access.py",
           "    if email == execution.assigned_reviewer:", "    if True:", (WHO,)),
    # Each channel's own check.
    Mutant("api: the reviewer-or-owner pre-check", "api/decisions.py",
           "    if found is None or not (is_reviewer or found.user_id == caller.user_id):",
           "    if found is None:", (WHO, API_DECISION)),
    Mutant("api: the owner who is not the reviewer", "api/decisions.py",
           "    if not is_reviewer:", "    if False:", (WHO, API_DECISION)),
    Mutant("inbox: the decide route's check", "review/inbox.py",
           "    if not await may_decide(session, execution, checkpoint, email, utcnow()):\n"
           "        abort(404)\n    try:",
           "    if False:\n        abort(404)\n    try:", (WHO, INBOX)),
    Mutant("inbox: who may open a checkpoint's page", "review/inbox.py",
           "    if not (named or await may_decide(session, execution, checkpoint, email, utcnow())):",
           "    if False:", (WHO, INBOX)),
    Mutant("inbox: the page offers the form", "review/inbox.py",
           "        and await may_decide(session, execution, checkpoint, email, now)\n    )",
           "        and True\n    )", (WHO, INBOX)),
    Mutant("inbox: the waiting list", "review/inbox.py",
           "        if await may_decide(session, execution, checkpoint, email, now):", "        if True:",
           (WHO, INBOX)),
    Mutant("chat: a signed-in reviewer", "chat/access.py",
           "    reviewer_signed_in = person is not None and await may_decide(session, execution, None, person.email, "
           "utcnow())", "    reviewer_signed_in = person is not None", (WHO,)),
    Mutant("chat: the mail's chat link while usable", "chat/access.py",
           '    return link if state.status == "usable" else None', "    return link", (WHO, TOKENS)),
    Mutant("chat: the mail's chat link is a chat link of this execution", "chat/access.py",
           '    if link is None or link.purpose != "chat" or link.execution_id != execution.id:',
           "    if link is None:", (WHO, TOKENS, LINKS)),
    Mutant("chat: no decider, no decision", "chat/socket.py",
           "            if access.decider is None:", "            if False:", (WHO,)),
    Mutant("chat: a session's decision carries its CSRF token", "chat/socket.py",
           "            if access.via_session and not (", "            if False and not (",
           ("tests/chat/test_review_events.py", "tests/chat/test_socket.py")),
    Mutant("mail link: only a usable link decides", "review/by_mail.py",
           '    if state.status != "usable":\n        raise LinkRefused(state)',
           "    if False:\n        raise LinkRefused(state)", (WHO, LINKS, TOKENS)),
    Mutant("mail link: a replaced reviewer's link", "review/by_mail.py",
           "    elif link.reviewer_email != execution.assigned_reviewer or link.used_at is not None:",
           "    elif False:", (WHO, TOKENS)),
    Mutant("mail link: a disabled reviewer's link", "review/by_mail.py",
           "    elif await disabled(session, link.reviewer_email):", "    elif False:", (WHO,)),
    Mutant("mail link: the form's CSRF token", "review/pages.py",
           '    if not _csrf_ok(link, form.get("csrf_token")):', "    if False:", (LINKS,)),
    Mutant("reassign: the old reviewer's links are spent", "review/reassign.py",
           "    await spend_links_of_others(session, execution.id, reviewer)", "    pass", (WHO, TOKENS)),
    Mutant("reply: from the reviewer only", "review/inbound.py",
           "            if header_from != reviewer or mail_from.lower() != reviewer:", "            if False:",
           (WHO, SMTP)),
    # Leases, fencing, exactly once.
    Mutant("claim: a live lease is not claimed again", "agents/claims.py",
           "        sa.or_(columns.lease_until.is_(None), "
           'columns.lease_until < sa.bindparam("now", type_=UTCDateTime())),',
           "        sa.true(),", (CLAIMS,)),
    Mutant("fence: writes carry the claim's epoch", "agents/claims.py",
           '    EXECUTIONS.c.lease_epoch == sa.bindparam("claim_epoch"),\n', "", (CLAIMS, RUNNER)),
    Mutant("fence: the run's last step ends it only for its claim", "agents/runner.py",
           "_FENCED_LAST_STEP = seq_allocation(\n    *CLAIM_HOLDS,\n", "_FENCED_LAST_STEP = seq_allocation(\n",
           (APPROVED,)),
    Mutant("checkpoint: the run's last step does not end it while a checkpoint waits", "agents/runner.py",
           "    ~sa.exists().where(*UNREVIEWED),\n", "", (APPROVED, RUNNER)),
    Mutant("edits: a call an approval edited is not handed back by the claim unedited", "agents/claims.py",
           "    if isinstance(cursor, int) and not edited:", "    if isinstance(cursor, int):", (EDITED, CLAIMS)),
    Mutant("mail: the send lease", "core/mail.py",
           "next_attempt_at=now + _SEND_LEASE)", "next_attempt_at=now)", (MAIL, CHAOS)),
    Mutant("mail: one message per intent", "core/mail.py",
           "    if existing is not None:\n        return existing\n    message = MailMessage(",
           "    message = MailMessage(", (MAIL, RUNNER)),
    Mutant("tool call: one row per step", "agents/tool_calls.py",
           "    if call is not None:\n        return call\n    call = ToolCall(", "    call = ToolCall(",
           ("tests/agents/test_model_agent.py", RUNNER)),
    Mutant("tool call: an unknown outcome is not repeated unasked", "agents/offline_steps.py",
           '            if not fresh and call.status == "started" and not TOOLS[call.tool].repeatable(call.args):',
           "            if False:", (RUNNER,)),
    Mutant("outbox: the lease taken by a claim (webhook deliveries, trace exports)", "core/outbox_claims.py",
           "locked_until=now + lease)", "locked_until=now)", (WEBHOOKS, TRACES)),
    Mutant("outbox: a live lease is not claimed again", "core/outbox_claims.py",
           "            sa.or_(table.locked_until.is_(None), table.locked_until < now),", "            sa.true(),",
           (WEBHOOKS, TRACES)),
    Mutant("trace export: queued with the event that completes its unit", "core/events.py",
           "            queue_spans_for_event(session, event.execution_id, event.type, event.payload)",
           "            pass", (TRACES,)),
    Mutant("trace export: a unit is queued only once complete", "core/trace_outbox.py",
           "    else:\n        return\n    now = utcnow()", "    else:\n        unit = RUN_UNIT\n    now = utcnow()",
           (TRACES,)),
    Mutant("trace export: a lapsed claim does not record over its successor", "core/trace_export.py",
           "            .where(TraceExport.id == row.id, TraceExport.attempts == row.attempts)",
           "            .where(TraceExport.id == row.id)", (TRACES,)),
    Mutant("scoring: a held lease is not claimed again", "agents/scoring.py",
           "        sa.or_(Execution.verdict_lease_until.is_(None), Execution.verdict_lease_until < now),",
           "        sa.true(),", (GRADING,)),
    Mutant("scoring: the lease is taken", "agents/scoring.py",
           ".values(verdict_lease_until=now + timedelta(seconds=settings.worker_lease_seconds))",
           ".values(verdict_lease_until=now)", (GRADING,)),
    Mutant("scoring: only a run still to score is claimed", "agents/scoring.py",
           "        Execution.verdict_state == VerdictState.PENDING,\n", "", (GRADING, VERDICTS)),
]  # fmt: skip


def copy_tree(into: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    for name in listed:
        source = ROOT / name
        if source.is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (into / "node_modules").symlink_to(ROOT / "node_modules")


def run(mutant: Mutant, tree: Path) -> tuple[str, float]:
    path = tree / mutant.path
    original = path.read_text()
    if original.count(mutant.before) != 1:
        return "broken (the line is not found once)", 0.0
    path.write_text(original.replace(mutant.before, mutant.after))
    began = time.monotonic()
    try:
        done = subprocess.run(
            # One process: with xdist, -x ends the run as "interrupted" (exit 2), which would read as broken.
            [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", *mutant.tests],
            cwd=tree,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        path.write_text(original)
    took = time.monotonic() - began
    if done.returncode == 0:
        return "SURVIVED", took
    if done.returncode == 1:
        return "caught", took
    return f"broken (pytest exit {done.returncode})", took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="run the mutants whose name contains this")
    options = parser.parse_args()
    os.environ.setdefault("VOUCH_TEST_DATABASES", "sqlite")
    chosen = [m for m in MUTANTS if options.only in m.name]
    survived = 0
    with tempfile.TemporaryDirectory(prefix="vouch-mutants-") as directory:
        tree = Path(directory)
        copy_tree(tree)
        for mutant in chosen:
            verdict, took = run(mutant, tree)
            survived += verdict != "caught"
            print(f"{verdict:<10} {took:6.1f}s  {mutant.name}  ({mutant.path})", flush=True)
    print(f"{len(chosen) - survived} caught, {survived} not caught, of {len(chosen)} mutants")
    return 1 if survived else 0


if __name__ == "__main__":
    raise SystemExit(main())
