"""The README's first run, as a new user follows it, on a fresh data directory: start the service, make a user with
a password and a key, create the task, open the chatUrl in Chromium, sign in, click Approve, see it finish.

The commands are read from README.md itself (its "Set up" start command and the "First run" shell blocks), so this
test fails when the README drifts from what works. Only the port changes (8000 may be taken on a test machine),
and `.venv/bin/` becomes this venv's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa
from playwright.async_api import Browser, async_playwright, expect

from core.models import MailMessage
from tests.e2e.test_browser_keys import CHROMIUM, CHROMIUM_ARGS
from tests.support.ports import free_port
from tests.support.processes import running, wait_until_healthy

README = Path(__file__).resolve().parents[2] / "README.md"
VENV_BIN = str(Path(sys.executable).parent)


def _section(text: str, heading: str) -> str:
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _shell_blocks(section: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def _localise(command: str, port: int) -> str:
    return command.replace(".venv/bin/", f"{VENV_BIN}/").replace("127.0.0.1:8000", f"127.0.0.1:{port}")


def readme_first_run(port: int) -> tuple[list[str], str, str, str]:
    """The start command, the first run's script, and the e-mail and password it makes the user with."""
    text = README.read_text(encoding="utf-8")
    setup = _section(text, "Set up")
    assert "http://127.0.0.1:8000" in setup
    start = _shell_blocks(setup)[0].strip().split(" && ")[-1]
    assert start == ".venv/bin/vouch serve", start
    first_run = _section(text, "First run")
    script = "\n".join(_shell_blocks(first_run))
    made = re.search(r"printf '%s' '([^']+)' \| \.venv/bin/vouch users create (\S+) --password-stdin", script)
    assert made, script
    return [*_localise(start, port).split(), "--port", str(port)], _localise(script, port), made.group(2), made.group(1)


def _fresh_env() -> dict[str, str]:
    # Nothing of ours: the README's defaults (./var under the directory the commands run in).
    return {name: value for name, value in os.environ.items() if not name.startswith("VOUCH_")}


async def test_the_readme_first_run_ends_with_an_approval_in_the_browser(tmp_path: Path) -> None:
    port = free_port()
    start, script, email, password = readme_first_run(port)
    base = f"http://127.0.0.1:{port}"
    workdir = tmp_path / "checkout"
    workdir.mkdir()
    log = tmp_path / "serve.log"
    with running(start, _fresh_env(), log, cwd=workdir) as server:
        await wait_until_healthy(base, server, log)
        assert f"Sign in at {base}/signin" in log.read_text()
        ran = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=workdir, env=_fresh_env(),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        created = json.loads(ran.stdout.strip().splitlines()[-1])
        assert created["success"] is True and created["chatUrl"].startswith(f"{base}/chat/exe_")

        async with async_playwright() as playwright:
            chromium: Browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = await (await chromium.new_context()).new_page()
                page.set_default_timeout(30_000)
                await page.goto(created["chatUrl"])
                # The run streams in and stops at the "Send" card, showing the mail it is about to send.
                card = page.locator(".checkpoint", has_text="Send it?")
                await expect(card).to_be_visible()
                await expect(card).to_contain_text("send_email")
                await page.locator("header.site").get_by_role("link", name="Sign in").click()
                await page.get_by_label("E-mail").fill(email)
                await page.get_by_label("Password").fill(password)
                await page.get_by_role("button", name="Sign in").click()
                # Back on the chat, as the assigned reviewer: Approve is there.
                await expect(page).to_have_url(created["chatUrl"])
                await page.locator("form.cp-form button[value=approve]").click()
                await expect(page.locator(".outcome-card.status-completed")).to_be_visible()
                await expect(page.locator("#status-text")).to_have_text("Completed")
                # "Mailbox" in the navigation shows the mail sent to you: the review mail.
                await page.locator("header.site").get_by_role("link", name="Mailbox").click()
                await expect(page.locator("main")).to_contain_text("Review needed: Release note — Send")
            finally:
                await chromium.close()
    # Through the model's columns: the bodies are stored compressed (core/models_base.py CompressedText).
    engine = sa.create_engine(f"sqlite:///{workdir / 'var' / 'vouch.sqlite3'}")
    try:
        with engine.connect() as conn:
            found = conn.execute(
                sa.select(MailMessage.recipient, MailMessage.text_body).where(MailMessage.status == "dev_mailbox")
            )
            mails = {recipient: text for recipient, text in found}
    finally:
        engine.dispose()
    # The agent's mail stayed in the dev mailbox; the review mail's links follow the port the service listens on
    # (no VOUCH_BASE_URL was set).
    assert mails["team@example.com"] == "v2 is out"
    assert f"{base}/review/link/" in mails[email]
