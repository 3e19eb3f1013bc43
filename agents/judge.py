"""The `llm_judge` scorer (issue 23): a model profile reads the task, the run's output and the rubric, and
answers through one tool, `verdict {passed, score, reasoning}`; its reasoning (and any thinking the provider
returns) is kept as the score's explanation. A judge that cannot answer (an unknown or unreachable model, an
answer that is not a verdict) scores `passed: null` with the reason: a scorer that did not run never passes.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic_ai.direct import model_request
from pydantic_ai.exceptions import ModelAPIError, UnexpectedModelBehavior
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import ToolDefinition

from agents.model_names import ModelUnavailable
from agents.providers import ModelRegistry
from core.model_profiles import EXTERNAL, OFFLINE
from core.scorers import score

log = logging.getLogger(__name__)

VERDICT = ToolDefinition(
    name="verdict",
    description="Give your verdict on the answer: whether it passes the rubric, a score, and your reasoning.",
    parameters_json_schema={
        "type": "object",
        "properties": {
            "passed": {"type": "boolean", "description": "true when the answer meets the rubric"},
            "score": {"type": "number", "minimum": 0, "maximum": 1, "description": "0 (worst) to 1 (best)"},
            "reasoning": {"type": "string", "description": "why, in a few sentences"},
        },
        "required": ["passed", "score", "reasoning"],
        "additionalProperties": False,
    },
)
INSTRUCTIONS = (
    "You are an impartial evaluator. You are given a task, the answer an agent produced, possibly the expected "
    "answer, and a rubric. Judge the answer against the rubric only. Call the `verdict` tool exactly once."
)


def _prompt(task: str, output: Any, expected: Any, rubric: str) -> str:
    def shown(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)

    parts = [f"## Task\n{task}", f"## The agent's answer\n{shown(output)}"]
    if expected is not None:
        parts.append(f"## Expected answer\n{shown(expected)}")
    parts.append(f"## Rubric\n{rubric}")
    return "\n\n".join(parts)


def _answer(response: ModelResponse) -> dict[str, Any] | None:
    for part in response.parts:
        if isinstance(part, ToolCallPart) and part.tool_name == VERDICT.name:
            try:
                return part.args_as_dict()
            except (ValueError, TypeError, AssertionError):
                return None
    text = "".join(part.content for part in response.parts if isinstance(part, TextPart)).strip()
    try:  # a model that answers the tool's arguments as text
        answer = json.loads(text.removeprefix("```json").removesuffix("```").strip())
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


async def judge(
    models: ModelRegistry, default_model: str, scorer: dict[str, Any], task: str, output: Any, expected: Any
) -> dict[str, Any]:
    name = scorer.get("model") or default_model
    if name in (OFFLINE, EXTERNAL):
        return score(scorer, None, None, f"no model to judge with: {name!r} is not a model profile", name)
    try:
        model = models.get(name)
    except ModelUnavailable as exc:
        return score(scorer, None, None, f"the judge model is unavailable: {exc}", name)
    messages = [
        ModelRequest(
            parts=[SystemPromptPart(INSTRUCTIONS), UserPromptPart(_prompt(task, output, expected, scorer["rubric"]))]
        )
    ]
    try:
        response = await model_request(
            model,
            list(messages),
            model_request_parameters=ModelRequestParameters(function_tools=[VERDICT], allow_text_output=True),
        )
    except (ModelAPIError, UnexpectedModelBehavior) as exc:
        log.info("llm_judge %s could not answer: %s", name, exc)
        return score(scorer, None, None, f"the judge model could not answer: {exc}"[:1000], name)
    answer = _answer(response)
    thinking = "\n".join(part.content for part in response.parts if isinstance(part, ThinkingPart) and part.content)
    passed, value = (answer or {}).get("passed"), (answer or {}).get("score")
    if (
        not isinstance(passed, bool)
        or isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= 1
    ):
        said = "the judge's answer is not a verdict {passed, score 0..1, reasoning}"
        entry = score(scorer, None, None, said, name)
    else:
        entry = score(scorer, passed, float(value), str(answer.get("reasoning") or "").strip() if answer else "", name)
    if thinking:
        entry["thinking"] = thinking
    entry["usage"] = {"inputTokens": response.usage.input_tokens, "outputTokens": response.usage.output_tokens}
    return entry
