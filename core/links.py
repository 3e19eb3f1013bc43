"""Links the service hands out. The chat link carries a view token derived by HMAC, so it
can be shared like a document link, checked without a lookup, and never stored."""

from __future__ import annotations

import base64
import hashlib
import hmac


def chat_view_token(secret_key: bytes, execution_id: str) -> str:
    digest = hmac.new(secret_key, f"chat-view:{execution_id}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest[:18]).decode()


def chat_view_token_valid(secret_key: bytes, execution_id: str, token: str) -> bool:
    return hmac.compare_digest(chat_view_token(secret_key, execution_id), token)


def chat_url(base_url: str, secret_key: bytes, execution_id: str) -> str:
    return f"{base_url.rstrip('/')}/chat/{execution_id}?token={chat_view_token(secret_key, execution_id)}"


def reviewer_chat_url(base_url: str, secret_key: bytes, execution_id: str, review_token: str) -> str:
    """The review mail's chat link: the view token to watch, and `rt`, the mail's own single-use review token
    (review/links.py, purpose "chat") that lets its reader decide the attempt the mail was sent for."""
    return f"{chat_url(base_url, secret_key, execution_id)}&rt={review_token}"
