"""`POST /api/eval/executions/<id>/webhook/redeliver`: the completion notification again, as a new message."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from api.auth import current_caller, owned_execution, require_scope
from api.problems import ApiError, not_found
from core.web.services import db_session
from core.webhooks import RedeliveryRefused, redeliver

blueprint = Blueprint("webhooks", __name__, url_prefix="/api/eval/executions")


@blueprint.post("/<execution_id>/webhook/redeliver")
@require_scope("eval:manage")
async def redeliver_webhook(execution_id: str) -> tuple[dict[str, Any], int]:
    session = db_session()
    execution = await owned_execution(session, execution_id, current_caller())
    try:
        delivery = await redeliver(session, execution)
    except RedeliveryRefused as exc:
        if exc.code == "not_found":  # deleted between the two reads
            raise not_found("execution") from None
        raise ApiError(409, exc.code, str(exc)) from None
    return {"success": True, "executionId": execution.id, "webhookId": delivery.id}, 202
