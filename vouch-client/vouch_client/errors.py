"""The client's exceptions: one hierarchy, each API error carrying the server's problem details.

    VouchError                      anything the client raises
    ├── TransportError              the server could not be reached (after the retries allowed)
    ├── StreamError                 the live stream could not be followed
    ├── WaitTimeout                 wait() gave up before the execution finished
    └── ApiError                    the server answered with an error (problem details attached)
        ├── BadRequest        400   (invalid_json, invalid_body, invalid_idempotency_key, invalid_cursor)
        ├── Unauthorized      401
        ├── PermissionDenied  403   (insufficient_scope, not_assigned_reviewer)
        ├── NotFound          404
        ├── Conflict          409   (already_decided, execution_finished, ...)
        ├── ValidationFailed  422   (`errors` names each field)
        ├── RateLimited       429   (`retry_after` in seconds)
        └── ServerError       5xx

Branch on the class for the kind, and on `code` for the exact reason: codes are stable, messages are not.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from vouch_client.models import FieldError, Problem


class VouchError(Exception):
    """Base of every error the client raises."""


class TransportError(VouchError):
    """The server could not be reached, or the connection broke, and no retry was left (or allowed)."""


class StreamError(VouchError):
    """The live stream refused us or kept failing."""


class WaitTimeout(VouchError):
    """wait() reached its timeout while the execution was still unfinished; `status` is the last one seen."""

    def __init__(self, execution_id: str, timeout: float, status: str | None) -> None:
        super().__init__(f"execution {execution_id} not finished after {timeout:g} s (last status: {status})")
        self.execution_id = execution_id
        self.timeout = timeout
        self.status = status


class ApiError(VouchError):
    """The server answered with an error; the problem details are on the exception."""

    def __init__(self, problem: Problem, headers: httpx.Headers | None = None) -> None:
        super().__init__(f"{problem.status} {problem.code}: {problem.detail}")
        self.problem = problem
        self.headers = headers or httpx.Headers()

    @property
    def status(self) -> int:
        return self.problem.status

    @property
    def code(self) -> str:
        return self.problem.code

    @property
    def detail(self) -> str:
        return self.problem.detail

    @property
    def errors(self) -> list[FieldError]:
        return self.problem.errors

    @property
    def request_id(self) -> str | None:
        found: str | None = self.headers.get("X-Request-Id")
        return found


class BadRequest(ApiError):
    pass


class Unauthorized(ApiError):
    pass


class PermissionDenied(ApiError):
    pass


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class ValidationFailed(ApiError):
    pass


class RateLimited(ApiError):
    @property
    def retry_after(self) -> float | None:
        return retry_after_seconds(self.headers)


class ServerError(ApiError):
    pass


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    422: ValidationFailed,
    429: RateLimited,
}


def retry_after_seconds(headers: httpx.Headers) -> float | None:
    """Retry-After as seconds; the server sends whole seconds (an HTTP date is not used by Vouch)."""
    raw = headers.get("Retry-After")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        return None


def error_from_response(response: httpx.Response) -> ApiError:
    """The exception for an error answer; a body that is not problem details still gives a useful one."""
    body: Any = None
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    if isinstance(body, dict) and isinstance(body.get("status"), int):
        problem = Problem.model_validate(body)
    else:
        # A proxy or balancer in between may answer in HTML: keep the status, say what came back.
        text = response.text.strip().splitlines()[0][:200] if response.text.strip() else response.reason_phrase
        problem = Problem(status=response.status_code, code=f"http_{response.status_code}", detail=text)
    kind = _BY_STATUS.get(response.status_code) or (ServerError if response.status_code >= 500 else ApiError)
    return kind(problem, response.headers)
