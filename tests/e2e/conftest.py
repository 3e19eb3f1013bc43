"""Playwright's `expect` waits 20 s, not its default 5 s, for what a page must come to show.

The browser tests set their pages' default timeouts (20-30 s) for what follows a run of the agent or a round trip
through a worker; `expect` does not read those, and on a loaded 2-core machine running the suite on several workers
a run took longer than 5 s to reach the page. A deadline, not a measurement: a test that bounds a delay passes its
own timeout (as test_chat_browser's "within a second" does).
"""

from playwright.async_api import expect

expect.set_options(timeout=20_000)
