"""examples/langgraph_mail_agent.py as its docstring runs it: a process of its own against a real Vouch, its
mail to a real SMTP server, the reviewer deciding through the API with an edited subject."""

from __future__ import annotations

import asyncio
import os
import sys
from email import message_from_bytes
from pathlib import Path

from vouch_client import AsyncClient

from tests.adapters.helpers import Decision, Reviewer
from tests.client.conftest import OWNER, Vouch
from tests.review.mail_support import smtp_sink

EXAMPLE = Path(__file__).parents[2] / "examples" / "langgraph_mail_agent.py"


async def test_the_example_sends_the_mail_as_the_reviewer_edited_it(vouch: Vouch, tmp_path: Path) -> None:
    with smtp_sink(asyncio.get_running_loop()) as (sink, port):
        env = {**os.environ, "VOUCH_URL": vouch.base, "VOUCH_API_KEY": vouch.owner.key, "VOUCH_REVIEWER": OWNER,
               "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port)}
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(EXAMPLE), cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None
        first = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        execution_id = first.split()[1].rstrip(":")
        reviewer = Reviewer(vouch, execution_id, [Decision("approve", edited_args={"subject": "v2 is out"})])
        async with reviewer.running():
            out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err.decode()

        assert out.decode().strip() == "Done. (sent to team@example.com)"
        [envelope] = sink.envelopes
        mail = message_from_bytes(envelope.content)
        assert (mail["To"], mail["Subject"]) == ("team@example.com", "v2 is out")
        async with AsyncClient(vouch.base, vouch.owner.key) as client:
            record = await client.status(execution_id)
        assert record.status == "completed"
