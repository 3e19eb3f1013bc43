"""The review mail as a reviewer's mail client receives it, over real SMTP (aiosmtpd): an HTML part laid out in
tables with real buttons, a text part that reads on its own, the exact action the run waits on (the checkpoint's
`next_action`), and a reply offered only where replies are read (VOUCH_INBOUND_SMTP)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from email import message_from_bytes, policy
from email.message import EmailMessage
from html.parser import HTMLParser

import pytest

from core.settings import Settings
from core.tool_args import argument_lines
from tests.conftest import Service
from tests.review.mail_support import REPLY_TAG, Sink, checkpoint_row, free_port, paused_run, smtp_sink

DESCRIPTION = 'Write a note called plan.md saying "ship it & <go>".'


@pytest.fixture
async def sink() -> AsyncIterator[tuple[Sink, int]]:
    with smtp_sink(asyncio.get_running_loop()) as found:
        yield found


@pytest.fixture(params=["replies off", "replies on"])
def settings(request: pytest.FixtureRequest, settings: Settings, sink: tuple[Sink, int]) -> Iterator[Settings]:
    inbound = f"127.0.0.1:{free_port()}" if request.param == "replies on" else None
    yield settings.with_changes(
        smtp_url=f"smtp://127.0.0.1:{sink[1]}", mail_from="Vouch <vouch@vouch.test>", inbound_smtp=inbound,
        worker_poll_seconds=0.2,
    )  # fmt: skip


async def received(sink: Sink) -> EmailMessage:
    await asyncio.wait_for(sink.arrived.wait(), 15)
    (envelope,) = sink.envelopes
    message = message_from_bytes(envelope.content, policy=policy.default)
    assert isinstance(message, EmailMessage)
    return message


class Layout(HTMLParser):
    """What a mail client draws: the tables, and each link with the cell it sits in (a button is a link alone in a
    coloured cell)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables = 0
        self.cells: list[dict[str, str | None]] = []
        self.links: list[tuple[str, str, str | None]] = []  # (text, href, the enclosing cell's bgcolor)
        self._href: str | None = None
        self._text = ""
        self.scripts = 0
        self.text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.text += " "  # cells and paragraphs read apart
        if tag == "table":
            self.tables += 1
        elif tag == "td":
            self.cells.append(found)
        elif tag == "a":
            self._href, self._text = found.get("href"), ""
        elif tag in ("script", "img", "style"):
            self.scripts += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._text.strip(), self._href, self.cells[-1].get("bgcolor") if self.cells else None))
            self._href = None

    def handle_data(self, data: str) -> None:
        self.text += data
        if self._href is not None:
            self._text += data


async def test_the_review_mail_is_html_with_buttons_a_readable_text_part_and_the_exact_action(
    service: Service, sink: tuple[Sink, int]
) -> None:
    replies = service.settings.inbound_smtp is not None
    run = await paused_run(service, DESCRIPTION)
    message = await received(sink[0])
    text_part, html_part = message.get_body(preferencelist=("plain",)), message.get_body(preferencelist=("html",))
    assert text_part is not None and html_part is not None
    text, html = str(text_part.get_content()).replace("\r\n", "\n"), str(html_part.get_content())
    action = (await checkpoint_row(service, run.checkpoint_id)).next_action
    assert action is not None and action["tool"] == "write_file"

    layout = Layout()
    layout.feed(html)
    assert layout.tables >= 3 and layout.scripts == 0
    buttons = {label: (href, colour) for label, href, colour in layout.links if label in ("Approve", "Reject")}
    assert set(buttons) == {"Approve", "Reject"} and all(colour for _, colour in buttons.values()), layout.links
    assert {label: href for label, (href, _) in buttons.items()} == {
        "Approve": re.search(r"Approve: +(\S+)", text).group(1),  # type: ignore[union-attr]
        "Reject": re.search(r"Reject: +(\S+)", text).group(1),  # type: ignore[union-attr]
    }
    assert any(label == "Open the live chat" for label, _, _ in layout.links)

    # The action the run waits on, word for word, with every argument in full, in both parts.
    words = " ".join(layout.text.split())
    assert f"Next, the agent will {action['instruction']}" in words
    for name, value in argument_lines(action["args"]):
        assert f"{name} {value}" in words
        assert f"  {name}:\n" + "\n".join("    " + line for line in value.split("\n")) in text
    assert f"NEXT, THE AGENT WILL\n{action['instruction']}\nTool: write_file, with these arguments" in text
    # The text part reads on its own: no markup, the task as written, labelled lines a person scans.
    assert not re.search(r"</?(p|br|table|tr|td|a|strong|code|h1)\b", text)
    assert "&amp;" not in text and "&lt;" not in text
    assert f"Task: {DESCRIPTION}" in text
    assert re.search(r"^Question: +Write it\?$", text, re.MULTILINE)

    offered = "reply to this mail"
    if replies:
        assert offered in text.lower() and offered in words.lower()
        assert REPLY_TAG.search(str(message["Subject"])) and str(message["Reply-To"]).startswith("review+")
    else:
        # Nobody reads replies: none is offered, and nothing in the mail leads one anywhere.
        assert "reply" not in text.lower() and "reply" not in words.lower()
        assert not REPLY_TAG.search(str(message["Subject"])) and message["Reply-To"] is None
