"""The rate limit at the HTTP edge: charge each keyed request, refuse with 429, and say so in headers.

Headers follow the current IETF draft, draft-ietf-httpapi-ratelimit-headers-10/-11 (structured fields):

    RateLimit-Policy: "default";q=100;w=60     the quota: 100 requests, 60-second window
    RateLimit: "default";r=57;t=26             57 left; t = seconds until the whole quota is back

plus the widespread X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset, whose Reset is the same
delay in seconds (not an epoch time, which would depend on the client's clock agreeing with ours). On a 429,
`t` equals Retry-After (the draft asks that Retry-After not point before the end of the effective window),
while X-RateLimit-Reset still says when the whole quota is back.

Only a request whose key authenticated is counted (after api/auth.py accepts the key): a stranger sending
garbage cannot spend someone's budget. The values are kept on `g` and added by an after_request hook, so an
error raised later in the view (404, 422, 409, ...) carries them too.
"""

from __future__ import annotations

from quart import Response, g

from api.app_services import app_services
from api.problems import ApiError
from api.ratelimit import Decision, Policy, ceil_seconds

POLICY_NAME = "default"


async def charge_request(key_id: str) -> None:
    """Count this request against the key; raise 429 rate_limit_exceeded when its quota is spent."""
    limiter = app_services().rate_limiter
    decision = await limiter.hit(key_id)
    g.rate_limit = (limiter.policy, decision)
    if not decision.allowed:
        wait = retry_after_seconds(decision)
        policy = limiter.policy
        raise ApiError(
            429,
            "rate_limit_exceeded",
            f"this API key may make {policy.limit} requests per {policy.window_seconds} seconds; try again in {wait} s",
            headers={"Retry-After": str(wait)},
        )


def retry_after_seconds(decision: Decision) -> int:
    # Whole seconds, rounded up and at least 1: a client that waits that long is admitted.
    return max(1, ceil_seconds(decision.retry_after))


def rate_limit_headers(policy: Policy, decision: Decision) -> dict[str, str]:
    reset = ceil_seconds(decision.reset_after)
    window = reset if decision.allowed else retry_after_seconds(decision)
    return {
        "RateLimit-Policy": f'"{POLICY_NAME}";q={policy.limit};w={policy.window_seconds}',
        "RateLimit": f'"{POLICY_NAME}";r={decision.remaining};t={window}',
        "X-RateLimit-Limit": str(policy.limit),
        "X-RateLimit-Remaining": str(decision.remaining),
        "X-RateLimit-Reset": str(reset),
    }


async def add_rate_limit_headers(response: Response) -> Response:
    found: tuple[Policy, Decision] | None = g.get("rate_limit")
    if found is not None:
        response.headers.update(rate_limit_headers(*found))
    return response
