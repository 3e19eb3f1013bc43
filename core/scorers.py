"""Scorers (issue 23): what judges a run's output against its `expected`, and how their scores make a verdict.

A task's `scorers` are each a name (`"exact"`) or an object (`{"type": "regex", "pattern": "..."}`); they are
checked and normalised at create (`normalise_scorers`, a ScorerProblem naming the field), stored on the execution,
and run once the run has ended: the deterministic ones here (`score_deterministic`), `llm_judge` by the worker
(agents/judge.py), `human` as a reviewer's grade (review/grading.py). Every score is
`{scorer, type, passed, score, explanation, by}`; `passed` None means the scorer could not say (it never
counts as a pass), and `combine` makes the verdict of them all.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError

DETERMINISTIC = ("exact", "includes", "regex", "json_schema")
TYPES = (*DETERMINISTIC, "llm_judge", "human")
# A score's `by` for what the service itself judged.
BY_SERVICE = "vouch"
MAX_SCORERS = 20
MAX_PATTERN = 1000
# Output longer than this is judged on its first part only: a regex or a schema check must stay cheap.
MAX_OUTPUT = 200_000
_OPTIONS: dict[str, tuple[str, ...]] = {
    "exact": (),
    "includes": (),
    "regex": ("pattern", "flags"),
    "json_schema": ("schema",),
    "llm_judge": ("rubric", "model"),
    "human": ("deadline",),
}
_REQUIRED: dict[str, tuple[str, ...]] = {"regex": ("pattern",), "json_schema": ("schema",), "llm_judge": ("rubric",)}
_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}


class ScorerProblem(ValueError):
    """A scorer the create body cannot take; `pointer` names the field (`/scorers/1/pattern`)."""

    def __init__(self, pointer: str, detail: str) -> None:
        super().__init__(f"{pointer}: {detail}")
        self.pointer = pointer
        self.detail = detail


def normalise_scorers(raw: Any, *, has_expected: bool) -> list[dict[str, Any]]:
    """The scorers as objects `{type, name, ...options}`, checked; ScorerProblem at the first bad one."""
    if not isinstance(raw, list):
        raise ScorerProblem("/scorers", "must be a list of scorer names or objects")
    if len(raw) > MAX_SCORERS:
        raise ScorerProblem("/scorers", f"must hold at most {MAX_SCORERS} scorers")
    scorers = [_normalise_one(item, f"/scorers/{index}", has_expected) for index, item in enumerate(raw)]
    if sum(1 for s in scorers if s["type"] == "human") > 1:
        raise ScorerProblem("/scorers", "may name human once: one reviewer grades the result once")
    names = [s["name"] for s in scorers]
    if len(set(names)) != len(names):
        raise ScorerProblem("/scorers", "names every scorer once: give a `name` to tell two of one type apart")
    return scorers


def _normalise_one(item: Any, at: str, has_expected: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": item} if isinstance(item, str) else item
    if not isinstance(spec, dict):
        raise ScorerProblem(at, "must be a scorer name or an object with a `type`")
    kind = spec.get("type")
    if kind not in TYPES:
        raise ScorerProblem(f"{at}/type", f"unknown scorer {kind!r}: use one of {', '.join(TYPES)}")
    unknown = sorted(set(spec) - {"type", "name", *_OPTIONS[kind]})
    if unknown:
        raise ScorerProblem(f"{at}/{unknown[0]}", f"is not an option of the {kind} scorer")
    for option in _REQUIRED.get(kind, ()):
        if option not in spec:
            raise ScorerProblem(f"{at}/{option}", f"is required by the {kind} scorer")
    name = spec.get("name", kind)
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise ScorerProblem(f"{at}/name", "must be text of 1 to 100 characters")
    if kind in ("exact", "includes") and not has_expected:
        raise ScorerProblem(at, f"the {kind} scorer compares with `expected`: give it")
    out: dict[str, Any] = {"type": kind, "name": name}
    if kind == "regex":
        out.update(_regex(spec, at))
    elif kind == "json_schema":
        schema = spec["schema"]
        if not isinstance(schema, dict):
            raise ScorerProblem(f"{at}/schema", "must be a JSON Schema (an object)")
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except SchemaError as exc:
            raise ScorerProblem(f"{at}/schema", f"is not a valid JSON Schema: {exc.message}") from None
        out["schema"] = schema
    elif kind == "llm_judge":
        rubric = spec["rubric"]
        if not isinstance(rubric, str) or not rubric.strip() or len(rubric) > 10_000:
            raise ScorerProblem(f"{at}/rubric", "must be text of 1 to 10000 characters")
        model = spec.get("model")
        if model is not None and (not isinstance(model, str) or not model.strip()):
            raise ScorerProblem(f"{at}/model", "must be a model profile name")
        out.update(rubric=rubric, model=model)
    elif kind == "human":
        deadline = spec.get("deadline")
        if deadline is not None and (
            not isinstance(deadline, int) or isinstance(deadline, bool) or not 1 <= deadline <= 30 * 24 * 3600
        ):
            raise ScorerProblem(f"{at}/deadline", "must be a whole number of seconds from 1 to 2592000")
        out["deadline"] = deadline
    return out


def _regex(spec: dict[str, Any], at: str) -> dict[str, Any]:
    pattern, flags = spec["pattern"], spec.get("flags", "")
    if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_PATTERN:
        raise ScorerProblem(f"{at}/pattern", f"must be a regular expression of 1 to {MAX_PATTERN} characters")
    if not isinstance(flags, str) or set(flags) - set(_FLAGS):
        raise ScorerProblem(f"{at}/flags", "may hold only i, m and s")
    try:
        re.compile(pattern, _flags(flags))
    except re.error as exc:
        raise ScorerProblem(f"{at}/pattern", f"is not a valid regular expression: {exc}") from None
    return {"pattern": pattern, "flags": flags}


def _flags(letters: str) -> int:
    value = 0
    for letter in letters:
        value |= _FLAGS[letter]
    return value


def score(
    scorer: dict[str, Any], passed: bool | None, value: float | None, explanation: str, by: str
) -> dict[str, Any]:
    return {
        "scorer": scorer["name"],
        "type": scorer["type"],
        "passed": passed,
        "score": value,
        "explanation": explanation,
        "by": by,
    }


def _text(output: Any) -> str:
    text = output if isinstance(output, str) else json.dumps(output, sort_keys=True, ensure_ascii=False)
    return text[:MAX_OUTPUT]


def _as_json(output: Any) -> tuple[bool, Any]:
    if not isinstance(output, str):
        return True, output
    text = output.strip()
    # A model often fences its JSON answer in Markdown: the value is what the fence holds.
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL)
    try:
        return True, json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return False, None


def score_deterministic(scorer: dict[str, Any], output: Any, expected: Any) -> dict[str, Any]:
    """Run one of the DETERMINISTIC scorers on a completed run's output."""
    kind = scorer["type"]
    if output is None:
        return score(scorer, False, 0.0, "the run produced no output", BY_SERVICE)
    if kind == "exact":
        if isinstance(expected, str):
            same = _text(output).strip() == expected.strip()
        else:
            parsed, value = _as_json(output)
            same = parsed and value == expected
        said = "the output equals the expected value" if same else "the output differs from the expected value"
        return score(scorer, same, 1.0 if same else 0.0, said, BY_SERVICE)
    if kind == "includes":
        wanted = expected if isinstance(expected, list) else [expected]
        text = _text(output)
        found = [w for w in wanted if _text(w) in text]
        missing = [_text(w) for w in wanted if _text(w) not in text]
        passed = not missing
        said = "the output includes every expected part" if passed else f"missing: {', '.join(missing)[:500]}"
        return score(scorer, passed, len(found) / len(wanted) if wanted else 1.0, said, BY_SERVICE)
    if kind == "regex":
        match = re.search(scorer["pattern"], _text(output), _flags(scorer.get("flags", "")))
        said = f"matched {match.group(0)[:200]!r}" if match else "the pattern does not match the output"
        return score(scorer, match is not None, 1.0 if match else 0.0, said, BY_SERVICE)
    if kind == "json_schema":
        parsed, value = _as_json(output)
        if not parsed:
            return score(scorer, False, 0.0, "the output is not JSON", BY_SERVICE)
        validator = jsonschema.validators.validator_for(scorer["schema"])(scorer["schema"])
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is None:
            return score(scorer, True, 1.0, "the output is valid against the schema", BY_SERVICE)
        where = "/" + "/".join(str(p) for p in error.absolute_path)
        return score(scorer, False, 0.0, f"at {where}: {error.message}"[:1000], BY_SERVICE)
    raise ValueError(f"{kind} is not a deterministic scorer")


def ended_without_output(scorer: dict[str, Any], status: str) -> dict[str, Any]:
    """A run that did not complete fails every scorer: there is no result to judge."""
    return score(scorer, False, 0.0, f"the run ended {status}; a run that did not complete fails", BY_SERVICE)


def combine(scores: list[dict[str, Any]]) -> tuple[bool | None, float | None]:
    """The verdict of all scores: failed when one failed, unknown (None) when one could not say, else passed;
    the score is the mean of the scores given."""
    values = [s["passed"] for s in scores]
    passed: bool | None = False if False in values else None if None in values or not values else True
    numbers = [float(s["score"]) for s in scores if s["score"] is not None]
    return passed, (round(sum(numbers) / len(numbers), 6) if numbers else None)


def verdict_json(state: str | None, passed: bool | None, value: float | None, scores: list[Any] | None) -> Any:
    """The status record's and webhook's `verdict`: None for a task without scorers."""
    if state is None:
        return None
    return {"state": state, "passed": passed, "score": value, "scores": list(scores or [])}
