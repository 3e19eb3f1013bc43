"""The component schemas of the OpenAPI document: the request models the views validate with
(api/schemas.py), completed with what pydantic cannot say itself, and the response models
(api/openapi_models.py)."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from api.external_schemas import ExternalCheckpointIn, ExternalCompleteIn, ExternalEventsIn
from api.openapi_fields import ExecutionStatus
from api.openapi_models import RESPONSE_MODELS
from api.schemas import CreateTaskIn, DecisionIn, ExecutionPatchIn, GradeIn, SuiteIn

REQUEST_MODELS: tuple[type[BaseModel], ...] = (
    CreateTaskIn,
    ExecutionPatchIn,
    DecisionIn,
    GradeIn,
    ExternalEventsIn,
    ExternalCheckpointIn,
    ExternalCompleteIn,
    SuiteIn,
)
_REF = "#/components/schemas/{model}"
_NON_BLANK = r"\S"  # the models strip whitespace before checking min_length=1
# core/headers.py's control characters, which a single-line field (a name in a mail subject) and a URL refuse.
_CONTROL = r"\u0000-\u001f\u007f-\u009f\u2028\u2029"
_SINGLE_LINE = rf"^[^{_CONTROL}]*[^{_CONTROL}\s][^{_CONTROL}]*$"
_HTTP_URL = rf"^https?://[^/?#{_CONTROL}][^{_CONTROL}]*$"
# A profile name (core/model_profiles.py), `offline`, or `provider:model`; which profiles exist is the live list's.
_MODEL_NAME = r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63}|(openai|anthropic):.+)$"

# What the pydantic models cannot say themselves, per schema and property (description, and rules the
# validators apply in code). Every request property must have an entry: tests/api/test_openapi.py checks.
_REQUEST_FIELDS: dict[str, dict[str, dict[str, Any]]] = {
    "CreateTaskIn": {
        "taskName": {
            "description": "Name of the task: one line (no line break, tab or other control character), since "
            "it goes into the review mail's subject.",
            "pattern": _SINGLE_LINE,
        },
        "taskDescription": {"description": "What the agent must do.", "pattern": _NON_BLANK},
        "checkpoints": {"description": "Caller-defined verification points, passed in order."},
        "autoDetectCheckpoints": {
            "description": "Let the service add verification points: one per side effect the description names "
            "(sending e-mail, calling an external service, deleting, paying, publishing), counted in "
            "`checkpointCount`, and a review before every call of a tool that acts on the world."
        },
        "agentModel": {
            "description": "The agent's model for this task: one of the operator's model profiles by name, "
            "`offline`, `openai:<model>` or `anthropic:<model>` (`GET /api/eval/models` lists them); null or absent "
            "for the service's default (VOUCH_AGENT_MODEL). A name that is none of these is a 422.",
            "anyOf": [
                {"type": "string", "maxLength": 200, "pattern": _MODEL_NAME},
                {"type": "null"},
            ],
        },
        "testMode": {
            "description": "`with-verification`: pause at each checkpoint for the reviewer; "
            "`without-verification`: fully automated."
        },
        "assignedReviewer": {
            "description": "E-mail address of the reviewer who decides the checkpoints; null or empty for none.",
            "anyOf": [{"type": "string", "format": "email"}, {"type": "null"}],
        },
        "webhookUrl": {
            "description": "http(s) URL that receives the completion notification (no control characters); "
            "null or empty for none.",
            "anyOf": [{"type": "string", "maxLength": 2048, "pattern": _HTTP_URL}, {"type": "null"}],
        },
        "webhookEvents": {
            "description": "Webhook events to send besides the completion notification (`execution.completed`, "
            "always sent when `webhookUrl` is set): `checkpoint.awaiting_review`, `checkpoint.decided`. Each at "
            "most once; null or absent for none.",
            "anyOf": [
                {
                    "type": "array",
                    "maxItems": 2,
                    "uniqueItems": True,
                    "items": {"enum": ["checkpoint.awaiting_review", "checkpoint.decided"]},
                },
                {"type": "null"},
            ],
        },
        "maxRevisions": {
            "description": "Rejections of one checkpoint the agent revises after (default 3); "
            "the next rejection ends the execution `rejected`. 0: the first rejection ends it."
        },
        "backupReviewer": {
            "description": "E-mail address told after the escalation delay; may then decide too. Null for none.",
            "anyOf": [{"type": "string", "format": "email"}, {"type": "null"}],
        },
        "reviewDeadline": {
            "description": "Seconds a checkpoint attempt may wait for a decision; then `onDeadline` applies. "
            "Null: no deadline."
        },
        "onDeadline": {
            "description": "What the deadline decides (recorded `via: timeout`): `reject` ends the run, "
            "`approve` goes on, `cancel` cancels it."
        },
        "expected": {
            "description": "What the run should produce: any JSON value or text, compared with `result.output` by "
            "the `exact` and `includes` scorers (a list for `includes`: every item must appear) and shown to a "
            "judge and a grader."
        },
        "scorers": {
            "description": "How the run's `result.output` is judged once it ends; the status record's `verdict`. "
            "Each a name or an object with `type` and its options (and an optional `name`): `exact`, `includes`, "
            "`{type: regex, pattern, flags?}` (flags of i, m, s), `{type: json_schema, schema}`, "
            "`{type: llm_judge, rubric, model?}` (a model profile; default the run's model or VOUCH_AGENT_MODEL), "
            "`{type: human, deadline?}` (the assigned reviewer grades the result; deadline in seconds, default "
            "`reviewDeadline`). An unknown type, a bad pattern or an invalid schema is a 422 naming the field.",
            "anyOf": [
                {
                    "type": "array",
                    "maxItems": 20,
                    "items": {
                        "anyOf": [
                            {"enum": ["exact", "includes", "human"]},
                            {
                                "type": "object",
                                "required": ["type"],
                                "properties": {
                                    "type": {
                                        "enum": ["exact", "includes", "regex", "json_schema", "llm_judge", "human"]
                                    },
                                    "name": {"type": "string", "maxLength": 100},
                                    "pattern": {"type": "string", "maxLength": 1000},
                                    "flags": {"type": "string", "pattern": "^[ims]*$"},
                                    "schema": {"type": "object"},
                                    "rubric": {"type": "string", "maxLength": 10000},
                                    "model": {"type": "string"},
                                    "deadline": {"type": "integer", "minimum": 1, "maximum": 2592000},
                                },
                            },
                        ]
                    },
                },
                {"type": "null"},
            ],
        },
    },
    "CheckpointIn": {
        "stage": {
            "description": "Short label of the stage being verified: one line, like `taskName`.",
            "pattern": _SINGLE_LINE,
        },
        "description": {"description": "What happens at this stage."},
        "verificationQuestion": {
            "description": "The question the reviewer answers to approve or reject.",
            "pattern": _NON_BLANK,
        },
    },
    "ExecutionPatchIn": {
        "assignedReviewer": {
            "description": "The new reviewer's e-mail address; null to clear (only when no checkpoint needs one).",
            "anyOf": [{"type": "string", "format": "email"}, {"type": "null"}],
        },
        "webhookUrl": {
            "description": "The new http(s) webhook URL; null to clear.",
            "anyOf": [{"type": "string", "maxLength": 2048, "pattern": _HTTP_URL}, {"type": "null"}],
        },
    },
    "DecisionIn": {
        "decision": {
            "description": "`approve` resumes the agent; `reject` sends the comment back to the agent, which "
            "revises and asks again, until the task's `maxRevisions` is used up and the execution ends `rejected` "
            "(at once for the rule-based `offline` agent, which cannot read a comment)."
        },
        "comment": {"description": "A note for the record and the chat; required (non-blank) to reject."},
        "editedArgs": {
            "description": "Approve only: arguments of the checkpoint's tool call to change before it runs (the "
            "others stay as proposed; see the status record's `nextAction`). Checked against the tool's "
            "arguments: a 422 names the argument (`/editedArgs/subject`).",
            "anyOf": [{"type": "object", "minProperties": 1}, {"type": "null"}],
        },
        "rating": {
            "description": "An optional grade of what the reviewer saw, 1 (poor) to 5 (excellent), kept with the "
            "decision.",
            "anyOf": [{"type": "integer", "minimum": 1, "maximum": 5}, {"type": "null"}],
        },
        "labels": {
            "description": "Optional labels (each one line of at most 50 characters; at most 20, kept once each, "
            "in order), kept with the decision.",
            "anyOf": [{"type": "array", "items": {"type": "string", "maxLength": 50}}, {"type": "null"}],
        },
    },
    "SuiteIn": {
        "name": {"description": "The suite's name: one line of at most 200 characters.", "pattern": _SINGLE_LINE},
        "tasks": {
            "description": "1 to 500 task bodies, each exactly as `createTask` takes it (its `agentModel` and, when "
            "the suite sets one, its `testMode` are overridden).",
            "type": "array",
            "minItems": 1,
            "maxItems": 500,
            "items": {"$ref": "#/components/schemas/CreateTaskIn"},
        },
        "models": {
            "description": "1 to 20 distinct `agentModel` values (profile names, `offline`, "
            "`provider:model`); not `external`."
        },
        "repeats": {"description": "How many times each task runs with each model and mode (1 to 20)."},
        "testMode": {
            "description": "Every task's mode; `both` runs each task with and without verification; absent: each "
            "task keeps its own.",
        },
    },
    "GradeIn": {
        "passed": {"description": "Whether the run's result passes."},
        "rating": {
            "description": "An optional 1-5 rating; the human score is (rating - 1) / 4, else 1 for a pass, 0 for "
            "a fail.",
            "anyOf": [{"type": "integer", "minimum": 1, "maximum": 5}, {"type": "null"}],
        },
        "labels": {
            "description": "Optional labels, as for a checkpoint decision.",
            "anyOf": [{"type": "array", "items": {"type": "string", "maxLength": 50}}, {"type": "null"}],
        },
        "comment": {"description": "An optional comment: the human score's explanation."},
    },
}
# A rejection carries a comment (the agent revises from it) and no edits.
_REJECT_RULE = {
    "if": {"properties": {"decision": {"const": "reject"}}},
    "then": {
        "required": ["comment"],
        "properties": {"comment": {"type": "string", "pattern": r"\S"}, "editedArgs": {"type": "null"}},
    },
}
# JSON Schema 2020-12 for the create's one cross-field rule (api/schemas.py, reviewer_required).
_REVIEWER_RULE = {
    "if": {
        "properties": {"testMode": {"const": "with-verification"}},  # absent means with-verification too
        "anyOf": [
            {"required": ["checkpoints"], "properties": {"checkpoints": {"minItems": 1}}},
            {"required": ["autoDetectCheckpoints"], "properties": {"autoDetectCheckpoints": {"const": True}}},
        ],
    },
    "then": {
        "required": ["assignedReviewer"],
        "properties": {"assignedReviewer": {"type": "string", "pattern": _NON_BLANK}},  # "" counts as none
    },
}


def component_schemas() -> dict[str, Any]:
    pairs: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m, "validation") for m in REQUEST_MODELS]
    pairs += [(m, "serialization") for m in RESPONSE_MODELS]
    _, top = models_json_schema(pairs, ref_template=_REF)
    schemas: dict[str, Any] = top["$defs"]
    for name, schema in schemas.items():
        schema.pop("title", None)
        for prop_name, prop in schema.get("properties", {}).items():
            prop.pop("title", None)
            if name not in _REQUEST_FIELDS:
                prop.pop("default", None)  # answers always carry their fields; a default would suggest otherwise
                continue
            # An `anyOf` here replaces the model's own (`string | null`) with the format the validator enforces.
            prop.update(_REQUEST_FIELDS[name].get(prop_name, {}))
    schemas["CreateTaskIn"].update(_REVIEWER_RULE)
    schemas["DecisionIn"].update(_REJECT_RULE)
    schemas["ExecutionPatchIn"]["minProperties"] = 1  # an empty PATCH is a 422 ("nothing to change")
    schemas["ExecutionStatus"] = {
        "type": "string",
        "description": "Where an execution stands; `completed`, `failed`, `rejected` and `cancelled` are final.",
        "enum": list(get_args(ExecutionStatus)),
    }
    return schemas
