"""What each API call sends and how its answer is read, and when a failed attempt is tried again.

The sync and async clients share all of this; they differ only in how they send (httpx.Client or AsyncClient).

Retry rules (why each is safe):
- 429 on any call: the server refused before doing anything; wait `Retry-After` (at most `max_retry_wait`).
- 409 idempotency_key_in_use on a create: the first attempt is still running; its answer comes back on retry.
- A connection that could not be opened (connect error or timeout): nothing reached the server.
- Any other broken connection or a 502/503/504, only for idempotent calls: GET, PATCH (it sets values), and
  create, which always carries an Idempotency-Key, so a resent create returns the first answer instead of
  starting a second execution. Cancel, delete and decide are not resent after the request may have arrived;
  the error tells the caller to look at the status first.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from vouch_client.errors import ApiError, error_from_response, retry_after_seconds
from vouch_client.models import (
    CreatedTask,
    DecisionAnswer,
    DecisionRequest,
    ExecutionPage,
    ExecutionPatch,
    GradeRequest,
    StatusRecord,
    TaskSpec,
)

T = TypeVar("T")
USER_AGENT = "vouch-python-client/0.1"
_RETRYABLE_STATUS = frozenset({502, 503, 504})
# The 409 of a create whose Idempotency-Key is still being served: the first request's answer is coming, so wait.
KEY_IN_USE = "idempotency_key_in_use"


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    read: Any  # Callable[[httpx.Response], T]; a plain field keeps the dataclass generic-friendly
    json: dict[str, Any] | None = None
    params: list[tuple[str, str]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    idempotent: bool = False
    timeout: float | None = None  # this call's own, when it outlasts the client's (a long-poll)

    def answer(self, response: httpx.Response) -> T:
        result: T = self.read(response)
        return result


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 3
    backoff: float = 0.5  # first pause; doubles per attempt, with jitter
    max_backoff: float = 8.0
    max_retry_wait: float = 60.0  # a Retry-After longer than this is not waited for: the error is raised

    def _backoff(self, attempt: int) -> float:
        pause: float = min(self.max_backoff, self.backoff * 2**attempt)
        return pause * random.uniform(0.5, 1.0)  # jitter: many clients refused at once do not return at once

    def after_response(self, call: Call[Any], attempt: int, response: httpx.Response) -> float | None:
        """Seconds to wait before trying `call` again after this answer; None: do not retry."""
        if attempt >= self.max_retries:
            return None
        in_flight = response.status_code == 409 and _code(response) == KEY_IN_USE
        retryable = response.status_code == 429 or (in_flight and "Idempotency-Key" in call.headers)
        if not retryable and not (call.idempotent and response.status_code in _RETRYABLE_STATUS):
            return None
        hinted = retry_after_seconds(response.headers)
        if hinted is None:
            return self._backoff(attempt)
        return hinted if hinted <= self.max_retry_wait else None

    def after_error(self, call: Call[Any], attempt: int, error: httpx.TransportError) -> float | None:
        if attempt >= self.max_retries:
            return None
        never_sent = isinstance(error, httpx.ConnectError | httpx.ConnectTimeout)
        return self._backoff(attempt) if never_sent or call.idempotent else None


def _code(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("code") if isinstance(body, dict) else None


def checked(response: httpx.Response) -> httpx.Response:
    if response.is_success:
        return response
    raise error_from_response(response)


def _model(model: type[BaseModel]) -> Any:
    return lambda response: model.model_validate(checked(response).json())


def _segment(value: str) -> str:
    # An id goes into the path as one segment: "a/b" must not reach another route.
    return quote(value, safe="")


def _created(response: httpx.Response) -> CreatedTask:
    created = CreatedTask.model_validate(checked(response).json())
    created.replayed = response.headers.get("Idempotent-Replayed", "").lower() == "true"
    return created


def create_task(task: TaskSpec | Mapping[str, Any], idempotency_key: str | None = None) -> Call[CreatedTask]:
    spec = task if isinstance(task, TaskSpec) else TaskSpec.model_validate(dict(task))
    # Generated once per call, so every retry of this create carries the same key.
    key = idempotency_key or f"vouch-py-{uuid.uuid4()}"
    return Call(
        "POST",
        "/api/eval/create-task-agent",
        _created,
        json=spec.body(),
        headers={"Idempotency-Key": key},
        idempotent=True,
    )


def status(execution_id: str) -> Call[StatusRecord]:
    return Call("GET", f"/api/eval/status/{_segment(execution_id)}", _model(StatusRecord), idempotent=True)


def list_executions(
    status: str | Sequence[str] | None = None, limit: int | None = None, cursor: str | None = None
) -> Call[ExecutionPage]:
    params: list[tuple[str, str]] = []
    if status:
        params.append(("status", status if isinstance(status, str) else ",".join(status)))
    if limit is not None:
        params.append(("limit", str(limit)))
    if cursor:
        params.append(("cursor", cursor))
    return Call("GET", "/api/eval/executions", _model(ExecutionPage), params=params, idempotent=True)


def update(execution_id: str, patch: ExecutionPatch | Mapping[str, Any]) -> Call[StatusRecord]:
    body = patch if isinstance(patch, ExecutionPatch) else ExecutionPatch.model_validate(dict(patch))
    path = f"/api/eval/executions/{_segment(execution_id)}"
    return Call("PATCH", path, _model(StatusRecord), json=body.body(), idempotent=True)


def cancel(execution_id: str) -> Call[StatusRecord]:
    return Call("POST", f"/api/eval/executions/{_segment(execution_id)}/cancel", _model(StatusRecord))


def _nothing(response: httpx.Response) -> None:
    checked(response)


def delete(execution_id: str) -> Call[None]:
    return Call("DELETE", f"/api/eval/executions/{_segment(execution_id)}", _nothing)


def decide(
    execution_id: str,
    checkpoint_id: str,
    decision: str,
    comment: str = "",
    edited_args: Mapping[str, Any] | None = None,
    rating: int | None = None,
    labels: Sequence[str] | None = None,
) -> Call[DecisionAnswer]:
    fields: dict[str, Any] = {"decision": decision, "comment": comment, "rating": rating}
    if edited_args:
        fields["editedArgs"] = dict(edited_args)
    if labels:
        fields["labels"] = list(labels)
    body = DecisionRequest.model_validate(fields)
    path = f"/api/eval/executions/{_segment(execution_id)}/checkpoints/{_segment(checkpoint_id)}/decision"
    return Call("POST", path, _model(DecisionAnswer), json=body.model_dump(exclude_none=True))


def request_of(call: Call[Any]) -> dict[str, Any]:
    """Keyword arguments for httpx's request."""
    request: dict[str, Any] = {
        "method": call.method, "url": call.path, "json": call.json, "params": call.params, "headers": call.headers
    }
    if call.timeout is not None:
        request["timeout"] = call.timeout
    return request


def client_headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT, "Accept": "application/json"}


__all__ = ["ApiError", "Call", "RetryPolicy"]


def grade(
    execution_id: str,
    passed: bool,
    rating: int | None = None,
    labels: Sequence[str] | None = None,
    comment: str = "",
) -> Call[DecisionAnswer]:
    body = GradeRequest(passed=passed, rating=rating, labels=list(labels) if labels else None, comment=comment)
    path = f"/api/eval/executions/{_segment(execution_id)}/grade"
    return Call("POST", path, _model(DecisionAnswer), json=body.model_dump(exclude_none=True))
