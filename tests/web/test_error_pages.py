"""Errors on the site's pages come as pages of the site (its layout, its navigation); the API keeps problem+json.
And the navigation leads to every page: Webhooks and the API docs included."""

from __future__ import annotations

from quart import Quart

from api.pages import CSP
from tests.web.conftest import Site


async def test_an_unknown_page_is_a_styled_404_in_the_sites_layout(site: Site) -> None:
    page = await site.browser().get("/no/such/page")
    assert page.status == 404 and page.headers["Content-Type"].startswith("text/html")
    assert '<header class="site">' in page.text and "css/vouch.css" in page.text
    assert "<h1>Not Found</h1>" in page.text and "There is nothing here." in page.text
    assert page.headers["Content-Security-Policy"] == CSP
    # Signed in, the navigation is the signed-in one.
    browser, _ = await site.signed_in("ann@example.com")
    signed_in = await browser.get("/no/such/page")
    assert signed_in.status == 404 and "ann@example.com" in signed_in.text and 'href="/webhooks"' in signed_in.text


async def test_a_wrong_method_is_a_styled_405_with_allow(site: Site) -> None:
    page = await site.browser().post("/healthz", {})
    assert page.status == 405 and '<header class="site">' in page.text
    assert "does not take a POST request" in page.text
    assert "GET" in page.headers["Allow"]


async def test_a_server_error_is_a_styled_500_with_the_request_id(site: Site) -> None:
    app: Quart = site.app

    @app.get("/explode-for-test")
    async def explode() -> str:
        raise RuntimeError("boom")

    page = await site.browser().get("/explode-for-test")
    assert page.status == 500 and '<header class="site">' in page.text
    assert "boom" not in page.text and "Traceback" not in page.text
    assert f"Quote request id {page.headers['X-Request-Id']}" in page.text


async def test_the_api_keeps_problem_json(site: Site) -> None:
    client = site.app.test_client()
    missing = await client.get("/api/eval/nothing-here")
    assert missing.status_code == 404 and missing.mimetype == "application/problem+json"
    wrong = await client.put("/api/eval/create-task-agent")
    assert wrong.status_code == 405 and wrong.mimetype == "application/problem+json"


async def test_the_navigation_leads_to_webhooks_and_the_api_docs(site: Site) -> None:
    stranger = await site.browser().get("/")
    assert 'href="/api/docs"' in stranger.text and 'href="/signin"' in stranger.text
    browser, _ = await site.signed_in("ann@example.com")
    home = await browser.get("/")
    for link in ("/executions", "/keys", "/review/inbox", "/mailbox", "/webhooks", "/api/docs"):
        assert f'href="{link}"' in home.text, link
    assert (await browser.get("/webhooks")).status == 200
    assert (await browser.get("/api/docs")).status == 200
