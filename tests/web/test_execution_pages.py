"""The executions pages: ownership, filters, paging, escaping, the timeline, the delivery log and redelivery."""

from __future__ import annotations

import re

import sqlalchemy as sa

from core.ids import new_id
from core.models import WebhookAttempt, WebhookDelivery
from tests.support.html import only_our_script_files
from tests.support.scripted_run import Script, at, rejected_then_approved
from tests.web.conftest import Site

HOSTILE = '<script>alert("x")</script> & "quotes"'


def bars(html: str, kind: str) -> int:
    return len(re.findall(rf'data-kind="{kind}"', html))


async def test_only_the_owner_sees_an_execution(site: Site) -> None:
    owner, owner_id = await site.signed_in("owner@example.com")
    stranger, _ = await site.signed_in("stranger@example.com")
    execution_id = await rejected_then_approved(owner_id).write(site.db)
    assert (await owner.get(f"/executions/{execution_id}")).status == 200
    assert (await stranger.get(f"/executions/{execution_id}")).status == 404
    assert (await stranger.get("/executions/exe_nonexistent")).status == 404
    assert execution_id not in (await stranger.get("/executions")).text
    # Signed out: off to sign in, and back afterwards.
    anonymous = site.browser()
    page = await anonymous.get(f"/executions/{execution_id}")
    assert page.status == 303 and page.location == f"/signin?next=%2Fexecutions%2F{execution_id}"


async def test_execution_page_shows_timeline_metrics_and_decisions(site: Site) -> None:
    owner, owner_id = await site.signed_in("owner@example.com")
    script = rejected_then_approved(owner_id, task_name=HOSTILE)
    execution_id = await script.write(site.db)
    page = await owner.get(f"/executions/{execution_id}")
    assert page.status == 200, page.text
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    # One bar per review wait (attempt 1 rejected, attempt 2 approved), per tool call, per model request.
    assert bars(page.text, "review-wait") == 2
    assert bars(page.text, "tool-call") == 3
    assert bars(page.text, "model-request") == 2
    assert bars(page.text, "agent-work") == 3
    assert "Draft, attempt 1: waited 10.0 s (rejected)" in page.text
    assert "Draft, attempt 2: waited 30.0 s (approved)" in page.text
    assert "<dt>Review wait</dt><dd>40.0 s</dd>" in page.text
    assert "<dt>Agent working</dt><dd>3.1 s</dd>" in page.text
    assert "$0.0037" in page.text
    assert "— “shorter”" in page.text
    assert f'href="/chat/{execution_id}"' in page.text
    # The user's strings are text, never markup; and no script is inline (every one is a file of our own).
    assert only_our_script_files(page.text)
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &#34;quotes&#34;" in page.text


async def test_execution_page_reads_durations_as_the_chat_does(site: Site) -> None:
    """The page's durations come from core/formatting.py, as the chat's do (static/js/chat-view.js): a wait of
    119.6 s reads 1 min 59 s on both, not 2 min 00 s on one of them."""
    owner, owner_id = await site.signed_in("owner@example.com")
    script = Script(owner_id)
    checkpoint = script.checkpoint("Draft", status="approved")
    script.event(1, "execution.started", worker="w1")
    script.wait(3, checkpoint, 1)
    script.decide(122.6, checkpoint, 1, "approve")
    script.event(123, "execution.completed", status="completed")
    execution_id = await script.write(site.db)
    page = await owner.get(f"/executions/{execution_id}")
    assert page.status == 200, page.text
    assert "Draft, attempt 1: waited 1 min 59 s (approved)" in page.text
    assert "<dt>Review wait</dt><dd>1 min 59 s</dd>" in page.text


async def test_list_filters_and_pages(site: Site) -> None:
    owner, owner_id = await site.signed_in("owner@example.com")
    for i in range(27):
        await Script(owner_id, task_name=f"bulk {i:02d}", created=i * 3600.0, completed=i * 3600.0 + 60).write(site.db)
    await Script(owner_id, task_name="100% literal_name", status="failed", created=86400 * 3).write(site.db)
    await Script(owner_id, task_name=HOSTILE, status="queued", completed=None, created=86400 * 5).write(site.db)

    everything = await owner.get("/executions")
    assert "29 executions, page 1 of 2." in everything.text
    assert everything.text.count('href="/executions/exe_') == 25
    second = await owner.get("/executions?page=2")
    assert second.text.count('href="/executions/exe_') == 4
    assert "&lt;script&gt;" in everything.text and only_our_script_files(everything.text)

    failed = await owner.get("/executions?status=failed")
    assert "1 execution." in failed.text and "100% literal_name" in failed.text
    # The search is literal: "%" and "_" match only themselves.
    literal = await owner.get("/executions?q=0%25+lit")
    assert "1 execution." in literal.text
    assert "0 executions." in (await owner.get("/executions?q=_%25_")).text
    assert "28 executions" not in (await owner.get("/executions?q=bulk")).text
    assert "27 executions, page 1 of 2." in (await owner.get("/executions?q=BULK")).text
    day = at(0).date()
    one_day = await owner.get(f"/executions?from={day.isoformat()}&to={day.isoformat()}")
    assert "21 executions." in one_day.text  # T0 is 03:04: bulk 00 … 20 were created on its day
    # The charts cover the chosen days; the status chart stacks each day's executions.
    assert 'id="by-status"' in one_day.text and "<title>01-02: 21 completed</title>" in one_day.text
    bad = await owner.get("/executions?status=bogus&from=yesterday")
    assert bad.status == 200 and "Unknown status" in bad.text and "must be YYYY-MM-DD" in bad.text
    assert "bogus" not in bad.text.split("</form>")[0].split("<form")[0]


async def test_review_wait_distribution_on_the_list(site: Site) -> None:
    owner, owner_id = await site.signed_in("owner@example.com")
    await rejected_then_approved(owner_id).write(site.db)
    day = at(0).date().isoformat()
    page = await owner.get(f"/executions?from={day}&to={day}")
    assert "2 decided review waits" in page.text
    assert "<title>&lt; 1 min: 2 wait</title>" in page.text


async def test_delivery_log_and_redeliver(site: Site) -> None:
    owner, owner_id = await site.signed_in("owner@example.com")
    stranger, _ = await site.signed_in("stranger@example.com")
    script = rejected_then_approved(owner_id)
    script.webhook_url = "https://hooks.example.com/vouch"
    execution_id = await script.write(site.db)
    delivery_id = new_id("whd")
    async with site.db.transaction() as session:
        session.add(WebhookDelivery(id=delivery_id, execution_id=execution_id, user_id=owner_id,
                                    event_type="execution.completed", url=script.webhook_url, payload={},
                                    status="failed", attempts=1, created_at=at(121)))
        await session.flush()
        session.add(WebhookAttempt(delivery_id=delivery_id, number=1, started_at=at(121), status_code=500,
                                   latency_ms=42, response_excerpt="<b>boom</b>", error=None))
    path = f"/executions/{execution_id}"
    page = await owner.get(path)
    assert delivery_id in page.text and "&lt;b&gt;boom&lt;/b&gt;" in page.text and "42 ms" in page.text
    action = f"{path}/webhook/redeliver"
    assert f'action="{action}"' in page.text
    # The form's CSRF token is required and must be this session's.
    assert (await owner.post(action, {})).status == 400
    assert (await owner.post(action, {"csrf_token": "forged"})).status == 403
    assert (await stranger.submit("/executions", action, {})).status == 404
    done = await owner.submit(path, action, {})
    assert done.status == 303 and done.location == f"{path}?redeliver=queued#webhooks"
    async with site.db.reading() as session:
        count = await session.scalar(
            sa.select(sa.func.count()).select_from(WebhookDelivery).where(WebhookDelivery.execution_id == execution_id)
        )
    assert count == 2
    shown = await owner.get(f"{path}?redeliver=queued")
    assert "queued for delivery again" in shown.text


async def test_home_and_navigation_link_the_list(site: Site) -> None:
    owner, _ = await site.signed_in("owner@example.com")
    home = await owner.get("/")
    assert '<a href="/executions">Executions</a>' in home.text
