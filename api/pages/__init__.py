"""The account pages of the web interface: server-rendered, working without JavaScript.

One blueprint per resource, nested under `pages`, which gives them all the same security headers,
error pages and template context.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup, escape
from quart import Blueprint, Response, g, render_template, request
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from api.pages import (
    execution_pages,
    home_pages,
    key_pages,
    session_pages,
    signup_pages,
    suite_pages,
    webhook_pages,
)
from core.web.headers import PAGE_CSP, add_page_headers
from core.web.sessions import CsrfError, Viewer, current_viewer

blueprint = Blueprint("pages", __name__)
blueprint.register_blueprint(home_pages.blueprint)
blueprint.register_blueprint(session_pages.blueprint)
blueprint.register_blueprint(signup_pages.blueprint)
blueprint.register_blueprint(key_pages.blueprint)
blueprint.register_blueprint(execution_pages.blueprint)
blueprint.register_blueprint(webhook_pages.blueprint)
blueprint.register_blueprint(suite_pages.blueprint)

CSP = PAGE_CSP


@blueprint.after_request
async def security_headers(response: Response) -> Response:
    # Account pages are personal, and one shows a secret: no cache (or back button after sign-out) keeps them.
    return add_page_headers(response)


@blueprint.context_processor
def page_context() -> dict[str, Any]:
    return {"viewer": g.get("viewer")}


@blueprint.app_template_filter("vouch_time")
def format_time(value: datetime | None) -> Markup:
    """A UTC moment as people read it, machine-readable inside <time>."""
    if value is None:
        return Markup("—")
    value = value.astimezone(UTC)
    shown = value.strftime("%Y-%m-%d %H:%M UTC")
    return Markup('<time datetime="{}">{}</time>').format(value.isoformat(timespec="seconds"), escape(shown))


@blueprint.errorhandler(CsrfError)
async def csrf_failed(error: CsrfError) -> tuple[str, int]:
    page = await render_template("api/error.html", title="Form expired", message=error.message)
    return page, error.status


@blueprint.errorhandler(HTTPException)
async def http_error(error: HTTPException) -> Response:
    return await error_page(error)


async def _viewer_for_error(code: int) -> Viewer | None:
    """Who is signed in, for the navigation of an error page; never looked up for a server error (the database
    may be why), and an error page that cannot read it still shows, signed out."""
    if "viewer" in g or code >= 500:
        found: Viewer | None = g.get("viewer")
        return found
    try:
        return await current_viewer()
    except SQLAlchemyError:
        return None


_MESSAGES = {
    404: "There is nothing here. The address may be mistyped, or what it pointed to is gone or not yours.",
    405: "This address does not take a {method} request. If you came here by a form, go back and reload it.",
}


async def error_page(error: HTTPException, *, detail: str | None = None) -> Response:
    """An error as a page of the site (its layout and navigation), for browsers; the API answers problem+json."""
    code = error.code or 500
    message = detail or _MESSAGES.get(code, error.description or error.name).format(method=request.method)
    page = await render_template(
        "api/error.html", title=error.name, message=message, code=code, viewer=await _viewer_for_error(code)
    )
    response = Response(page, status=code, mimetype="text/html")
    if isinstance(error, MethodNotAllowed) and error.valid_methods:
        response.headers["Allow"] = ", ".join(sorted(error.valid_methods))
    return add_page_headers(response)
