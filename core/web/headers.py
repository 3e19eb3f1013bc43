"""The security headers every HTML page of ours sends, whichever package renders it."""

from __future__ import annotations

from quart import Response

# No inline script or style anywhere: an injected <script> has nowhere to run.
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; object-src 'none'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


def add_page_headers(
    response: Response, *, csp: str = PAGE_CSP, referrer_policy: str = "same-origin", no_store: bool = True
) -> Response:
    """`no-referrer` for pages whose address carries a token; `no_store` for anything personal."""
    response.headers.setdefault("Content-Security-Policy", csp)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Referrer-Policy", referrer_policy)
    if no_store:
        response.headers["Cache-Control"] = "no-store"
    return response
