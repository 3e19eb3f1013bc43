"""Log records that say which request and which execution they belong to.

The request id lives in a context variable, so anything logged while a request is
handled (in the view, the auth layer, the database layer) carries it without being
passed down. Outside a request the field reads "-". The execution id works the same
way (`execution_context`), and a record may also name one itself: `extra={"execution_id": …}`.

Two formats (`VOUCH_LOG_FORMAT`): `text`, one human line per record (the default), and
`json`, one JSON object per line for log collectors, with `requestId` and `executionId`
fields (null when there is none).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"
LOG_FORMATS = ("text", "json")

current_request_id: ContextVar[str | None] = ContextVar("vouch_request_id", default=None)
current_execution_id: ContextVar[str | None] = ContextVar("vouch_execution_id", default=None)


class RequestIdFilter(logging.Filter):
    """Stamps `record.request_id` and `record.execution_id`; attach it to handlers whose format names them."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id.get() or "-"
        if not getattr(record, "execution_id", None):
            record.execution_id = current_execution_id.get() or "-"
        return True


@contextmanager
def execution_context(execution_id: str) -> Iterator[None]:
    """Every record logged inside (in this task and tasks it starts) names `execution_id`."""
    token = current_execution_id.set(execution_id)
    try:
        yield
    finally:
        current_execution_id.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, requestId, executionId (+ exception)."""

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None) or current_request_id.get()
        execution_id = getattr(record, "execution_id", None) or current_execution_id.get()
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "requestId": None if request_id in (None, "-") else request_id,
            "executionId": None if execution_id in (None, "-") else execution_id,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # default=str: a message argument that JSON cannot hold still ends up in the line, not in a crash.
        return json.dumps(entry, ensure_ascii=False, default=str)


def make_formatter(log_format: str = "text") -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter()
    return logging.Formatter(LOG_FORMAT)


def configure_logging(level: int = logging.INFO, log_format: str = "text") -> None:
    """Log to stderr with the request id in every line (the CLI's processes), as text or JSON lines."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        if log_format == "json":
            handler.setFormatter(JsonFormatter())
        if not any(isinstance(f, RequestIdFilter) for f in handler.filters):
            handler.addFilter(RequestIdFilter())
