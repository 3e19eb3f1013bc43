"""The web app's services with the API's per-process parts: what api/app.py builds and holds on the app."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from api.ratelimit import RateLimiter
from api.usage import UsageRecorder
from core.auth_cache import ApiKeyCache
from core.bus import Listening
from core.web.services import Services, services

if TYPE_CHECKING:
    # A circle for the type checker only: api/status_cache.py finds its cache here, on the request's services.
    from api.status_cache import StatusCache


@dataclass
class AppServices(Services):
    # API key uses, counted per process and written in batches (api/usage.py).
    usage: UsageRecorder
    # Requests per key (api/ratelimit.py): in process, or shared through Redis when configured.
    rate_limiter: RateLimiter
    # Per-process caches of API keys and status records, kept current over the bus (api/status_cache.py).
    auth_cache: ApiKeyCache
    status_cache: StatusCache
    cache_listening: Listening


def app_services() -> AppServices:
    """The services of the request's app, with the API's parts (api/app.py always builds these)."""
    found = services()
    if not isinstance(found, AppServices):
        raise RuntimeError("the app's services were not built by api/app.py")
    return found
