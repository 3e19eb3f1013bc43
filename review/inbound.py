"""Reply to decide: an SMTP listener (aiosmtpd) for replies to review mail.

A reply decides only when all of these hold: it carries a review token, in the recipient address
(`review+<token>@…`, the review mail's Reply-To) or in the subject (`[vouch:<token>]`); both its From
header and its envelope sender are the reviewer the token was made for; and the first line that is
neither empty nor quoted says `approve` or `reject: <reason>`. Anything else is logged and ignored:
the sender gets a plain 250 either way, so the listener tells a prober nothing.

The server runs on the worker's own event loop (`loop.create_server` with aiosmtpd's protocol, rather
than aiosmtpd's Controller and its thread), so a reply is decided with the worker's database engine.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import errno
import logging
import re
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import getaddresses, parseaddr
from typing import Any

from aiosmtpd.smtp import SMTP

from core.db import Database
from core.settings import Settings, SettingsError
from review.by_mail import LinkRefused, decide_by_link
from review.decisions import Verdict
from review.links import find_link

log = logging.getLogger(__name__)

_ADDRESS_TOKEN = re.compile(r"^review\+([0-9a-f]{8,64})@", re.IGNORECASE)
_SUBJECT_TOKEN = re.compile(r"\[vouch:([0-9a-f]{8,64})\]", re.IGNORECASE)
_APPROVE = re.compile(r"^approve[.!]?$", re.IGNORECASE)
_REJECT = re.compile(r"^reject\s*:\s*(\S.*)$", re.IGNORECASE)
MAX_MESSAGE_BYTES = 1024 * 1024


def parse_listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SettingsError(f"VOUCH_INBOUND_SMTP must look like host:port, not {value!r}")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class Verdicts:
    verdict: Verdict
    comment: str


def read_verdict(body: str) -> Verdicts | None:
    """The first non-empty line not quoted with '>' decides; nothing else in the mail counts."""
    for raw in body.splitlines():
        line = raw.strip()
        if not line or line.startswith(">"):
            continue
        if _APPROVE.match(line):
            return Verdicts("approve", "")
        rejected = _REJECT.match(line)
        if rejected:
            return Verdicts("reject", rejected.group(1).strip())
        return None
    return None


def find_token(message: EmailMessage, recipients: list[str]) -> str | None:
    headers = [message.get("To", ""), message.get("Cc", "")]
    for _, address in [("", r) for r in recipients] + getaddresses(headers):
        found = _ADDRESS_TOKEN.match(address.strip())
        if found:
            return found.group(1).lower()
    subject = _SUBJECT_TOKEN.search(str(message.get("Subject", "")))
    return subject.group(1).lower() if subject else None


def plain_text(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain",))
    if part is None:
        return ""
    try:
        content = part.get_content()
    except (LookupError, ValueError):
        return ""
    return content if isinstance(content, str) else ""


class _Handler:
    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        peer = session.peer[0] if isinstance(session.peer, tuple) else None
        try:
            outcome = await self.consider(envelope.mail_from or "", list(envelope.rcpt_tos), envelope.content, peer)
        except Exception:
            log.exception("inbound review mail from %s could not be processed", peer)
            return "451 Try again later"
        log.info("inbound review mail from %s (%s): %s", envelope.mail_from, peer, outcome)
        return "250 OK"

    async def consider(self, mail_from: str, recipients: list[str], content: bytes | str, peer: str | None) -> str:
        """What became of one received message, in a word or two (logged; tests read it too)."""
        raw = content if isinstance(content, bytes) else content.encode()
        message = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        token = find_token(message, recipients)
        if token is None:
            return "ignored: no review token"
        try:
            return await self._decide(token, message, mail_from, peer)
        except _Refused as refused:
            if str(refused) == "disabled":
                return "ignored: the reviewer's account is disabled"
            return f"ignored: the review is {refused}"

    async def _decide(self, token: str, message: EmailMessage, mail_from: str, peer: str | None) -> str:
        async with self.db.transaction() as session:
            link = await find_link(session, self.settings.secret_key, token)
            if link is None or link.purpose != "reply":
                return "ignored: unknown token"
            reviewer = link.reviewer_email.lower()
            header_from = parseaddr(str(message.get("From", "")))[1].lower()
            if header_from != reviewer or mail_from.lower() != reviewer:
                return "ignored: not from the reviewer"
            verdict = read_verdict(plain_text(message))
            if verdict is None:
                return "ignored: first line is neither 'approve' nor 'reject: <reason>'"
            try:
                await decide_by_link(session, link, verdict.verdict, comment=verdict.comment, remote_addr=peer)
            except LinkRefused as refused:
                # Roll back (the link stays as it was) by leaving the transaction with an exception.
                raise _Refused(refused.state.status) from refused
        return f"decided: {verdict.verdict}"


class _Refused(Exception):
    pass


class InboundListener:
    """The listener's lifetime: `await start()` binds, `await stop()` closes; owned by the worker."""

    def __init__(self, settings: Settings, db: Database) -> None:
        if not settings.inbound_smtp:
            raise SettingsError("VOUCH_INBOUND_SMTP is not set")
        self.host, self.port = parse_listen(settings.inbound_smtp)
        self.handler = _Handler(settings, db)
        self._server: asyncio.Server | None = None

    async def start(self) -> bool:
        """Listening: True. False when the address is taken, most likely by another worker on this host that
        listens for the same replies (one listener is enough); other failures to bind raise."""
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: SMTP(self.handler, data_size_limit=MAX_MESSAGE_BYTES, hostname="vouch", loop=loop),
                host=self.host,
                port=self.port,
            )
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            log.warning(
                "VOUCH_INBOUND_SMTP %s:%d is already in use (by another worker on this host, or something else): "
                "this worker runs without the inbound review mail listener",
                self.host,
                self.port,
            )
            return False
        log.info("inbound review mail listener on %s:%d", self.host, self.port)
        return True

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
