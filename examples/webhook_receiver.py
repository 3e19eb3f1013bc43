"""Receive Vouch's completion webhook in a small web app and verify its signature.

    pip install ./vouch-client quart   # any framework works: verify the raw body bytes and the three headers
    VOUCH_WEBHOOK_SECRET=whsec_… python examples/webhook_receiver.py

Get the secret with `vouch webhooks secret you@example.com`, and give the task `"webhookUrl":
"http://<this host>:9000/vouch"`. Vouch refuses private and loopback targets unless an operator lists them in
VOUCH_WEBHOOK_ALLOWLIST (for this receiver on the same machine: VOUCH_WEBHOOK_ALLOWLIST=127.0.0.1:9000).
"""

from __future__ import annotations

import os

from quart import Quart, request
from vouch_client import WebhookVerificationError, verify_webhook

app = Quart(__name__)
SECRET = os.environ["VOUCH_WEBHOOK_SECRET"]
seen: set[str] = set()  # webhook-id is the same on every retry of one delivery: keep a real store in production


@app.post("/vouch")
async def vouch_webhook() -> tuple[str, int]:
    body = await request.get_data()  # the raw bytes: re-serialised JSON would not match the signature
    try:
        event = verify_webhook(body, dict(request.headers), SECRET)
    except WebhookVerificationError as exc:
        return f"refused: {exc}", 400
    delivery = request.headers["webhook-id"]
    if delivery not in seen:
        seen.add(delivery)
        data = event["data"]
        # execution.completed is sent whatever the outcome; data.status says how it ended.
        print(f"{event['type']}: {data['executionId']} {data.get('status')} - {data.get('summary')}")
    return "", 204  # any 2xx: Vouch stops retrying this delivery


if __name__ == "__main__":
    app.run(host="0.0.0.0", port=9000)
