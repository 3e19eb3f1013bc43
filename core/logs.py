"""Log records that say which request they belong to.

The request id lives in a context variable, so anything logged while a request is
handled (in the view, the auth layer, the database layer) carries it without being
passed down. Outside a request the field reads "-".
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"

current_request_id: ContextVar[str | None] = ContextVar("vouch_request_id", default=None)


class RequestIdFilter(logging.Filter):
    """Stamps `record.request_id`; attach it to handlers whose format names that field."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id.get() or "-"
        return True


def configure_logging(level: int = logging.INFO) -> None:
    """Log to stderr with the request id in every line (the CLI's processes)."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RequestIdFilter) for f in handler.filters):
            handler.addFilter(RequestIdFilter())
