"""Error answers as RFC 9457 problem details, with a stable `code` and `success: false`."""

from __future__ import annotations

from typing import Any

from quart import Response, json

PROBLEM_TYPE_BASE = "https://vouch.dev/problems/"


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        title: str | None = None,
        errors: list[dict[str, str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.title = title or _TITLES.get(status, "Error")
        self.errors = errors
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "success": False,
            "type": PROBLEM_TYPE_BASE + self.code,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
        }
        if self.errors:
            body["errors"] = self.errors
        return body

    def response(self) -> Response:
        response = Response(json.dumps(self.body()), status=self.status, content_type="application/problem+json")
        response.headers.update(self.headers)
        return response


_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Access Denied",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


def unauthorized(code: str, detail: str) -> ApiError:
    return ApiError(401, code, detail, headers={"WWW-Authenticate": 'Bearer realm="vouch", error="invalid_token"'})


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"no {what} with that id")
