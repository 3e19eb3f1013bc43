"""An Inspect AI eval log of a suite: one sample per run, written by Inspect's own writer (`inspect_ai.log`).

- A sample's id names its task, model and mode (`<taskIndex>-<model>-<testMode>`) and its epoch is the run's
  repeat, so `inspect view` lists a task's repeats as epochs of one sample.
- `input` is the task's description; `messages` the conversation rebuilt from the run's events (the description as
  the user's message, then each turn of the agent with its tool calls and their results:
  core/exports/conversation.py); `output` the run's `result.output`; `target` the expected output.
- `scores`: one per scorer of the verdict, its 0..1 score as the value (a scorer that could not say is Inspect's
  unscored NaN), the explanation, and `passed`, `by` and any rating and labels in its metadata.
- `model_usage`: tokens and cost per model, from the run's model requests.
- `metadata`: the suite's coordinates, the run's status and metrics, and every decision of its reviewers.
- A failed run is a sample with an `error`.

Inspect's writer takes the whole log, so the samples are held until it writes them; the rows behind them are
read a chunk of runs at a time. The writing (serialising, compressing) runs in a thread, off the event loop, into
a temporary file that is then streamed and removed. Inspect AI is imported here only, and only when a log is
asked for.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import tempfile
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncSession

from core.exports.conversation import turns_of
from core.exports.runs import ExportRun, LoadedRun, export_time, load_runs, run_record
from core.formatting import isoformat
from core.vocabulary import FINAL, EventType, ExecutionStatus

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog, EvalSample
    from inspect_ai.model import ChatMessage, ModelUsage
    from inspect_ai.scorer import Score

READ_SIZE = 1 << 20
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class SampleIds:
    """Sample ids from (task, model, mode): readable, safe in a file name (the `.eval` archive names a member
    after each), and distinct even when two model names differ only in characters a file name cannot hold."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, str, str], str] = {}
        self._taken: set[str] = set()

    def of(self, run: ExportRun) -> str:
        key = (run.task_index, run.model, run.test_mode)
        known = self._ids.get(key)
        if known is not None:
            return known
        base = f"{run.task_index}-{_UNSAFE.sub('_', run.model)}-{run.test_mode}"
        candidate, n = base, 1
        while candidate in self._taken:
            n += 1
            candidate = f"{base}-{n}"
        self._ids[key] = candidate
        self._taken.add(candidate)
        return candidate


def _target(expected: Any) -> str | list[str]:
    if expected is None:
        return ""
    if isinstance(expected, str):
        return expected
    if isinstance(expected, list) and all(isinstance(item, str) for item in expected):
        return list(expected)
    return json.dumps(expected, ensure_ascii=False)


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _messages(loaded: LoadedRun, output: str) -> list[ChatMessage]:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall, ToolCallError

    assert loaded.facts is not None
    messages: list[ChatMessage] = [ChatMessageUser(content=loaded.facts.execution.task_description, source="input")]
    last_text = ""
    for turn in turns_of(loaded.events, loaded.facts.decisions):
        calls = [ToolCall(id=call.id, function=call.tool, arguments=call.args) for call in turn.calls]
        messages.append(
            ChatMessageAssistant(content=turn.text, tool_calls=calls or None, model=turn.model, source="generate")
        )
        last_text = turn.text
        for call in turn.calls:
            if call.result is None:
                continue  # never answered (the run ended first)
            error = (
                ToolCallError("approval", call.result) if call.rejected
                else ToolCallError("unknown", call.error) if call.error is not None
                else None
            )
            messages.append(ChatMessageTool(content=call.result, tool_call_id=call.id, function=call.tool, error=error))
    if output and output.strip() != last_text.strip():
        # The final answer (a model's `finish` call, which is no tool event) closes the conversation.
        messages.append(ChatMessageAssistant(content=output, source="generate"))
    return messages


def _scores(verdict: dict[str, Any] | None, output: str) -> dict[str, Score] | None:
    from inspect_ai.scorer import Score

    if verdict is None or not verdict["scores"]:
        return None
    scores: dict[str, Score] = {}
    for entry in verdict["scores"]:
        extra = {k: entry[k] for k in ("rating", "labels", "comment", "via") if k in entry}
        metadata = {"type": entry.get("type"), "passed": entry.get("passed"), "by": entry.get("by"), **extra}
        explanation = entry.get("explanation")
        if entry.get("score") is None:
            scores[entry["scorer"]] = Score.unscored(
                reason="scoring_failed", answer=output, explanation=explanation, metadata=metadata
            )
        else:
            scores[entry["scorer"]] = Score(
                value=float(entry["score"]), answer=output, explanation=explanation, metadata=metadata
            )
    return scores


def _usage(loaded: LoadedRun) -> dict[str, ModelUsage]:
    from inspect_ai.model import ModelUsage

    usage: dict[str, ModelUsage] = {}
    for event in loaded.events:
        if event.type != EventType.MODEL_REQUEST:
            continue
        name = str(event.payload.get("model") or loaded.run.model)
        seen = usage.setdefault(name, ModelUsage(total_cost=0.0))
        seen.input_tokens += int(event.payload.get("inputTokens") or 0)
        seen.output_tokens += int(event.payload.get("outputTokens") or 0)
        seen.total_tokens = seen.input_tokens + seen.output_tokens
        cost = event.payload.get("costUsd")
        # One request of unknown price makes the model's cost unknown, as the run's costUsd is.
        seen.total_cost = None if cost is None or seen.total_cost is None else seen.total_cost + float(cost)
    return usage


def sample_of(loaded: LoadedRun, sample_id: str) -> EvalSample:
    from inspect_ai.log import EvalError, EvalSample
    from inspect_ai.model import ModelOutput

    record = run_record(loaded)
    facts = loaded.facts
    assert facts is not None
    execution = facts.execution
    output = _text(record["output"])
    metrics = record["metrics"]
    error = record["error"]
    failed = execution.status == ExecutionStatus.FAILED
    metadata = {
        key: record[key]
        for key in ("suiteId", "suiteName", "taskIndex", "taskName", "model", "testMode", "repeat", "executionId",
                    "status", "expected", "metrics", "decisions")
    }
    metadata["verdict"] = {k: v for k, v in (record["verdict"] or {}).items() if k != "scores"} or None
    return EvalSample(
        id=sample_id,
        epoch=loaded.run.repeat,
        input=execution.task_description,
        target=_target(execution.expected),
        messages=_messages(loaded, output),
        output=ModelOutput.from_content(loaded.run.model, output),
        scores=_scores(record["verdict"], output),
        metadata=metadata,
        model_usage=_usage(loaded),
        started_at=isoformat(execution.started_at),
        completed_at=isoformat(execution.completed_at),
        total_time=metrics["durationMs"] / 1000 if execution.status in FINAL else None,
        working_time=metrics["agentMs"] / 1000,
        uuid=execution.id,
        error=(
            EvalError(message=str((error or {}).get("detail") or "the run failed"), traceback="", traceback_ansi="")
            if failed else None
        ),
    )


def _results(samples: list[EvalSample]) -> Any:
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore

    values: dict[str, list[float]] = {}
    passes: dict[str, list[bool]] = {}
    for sample in samples:
        for name, score in (sample.scores or {}).items():
            values.setdefault(name, [])
            passes.setdefault(name, [])
            if isinstance(score.value, float) and not math.isnan(score.value):
                values[name].append(score.value)
            passed = (score.metadata or {}).get("passed")
            if isinstance(passed, bool):
                passes[name].append(passed)
    scores = []
    for name, scored in values.items():
        metrics = {}
        if scored:
            metrics["mean"] = EvalMetric(name="mean", value=sum(scored) / len(scored))
        if passes[name]:
            # The share of runs the scorer passed, over those it could judge.
            metrics["accuracy"] = EvalMetric(name="accuracy", value=sum(passes[name]) / len(passes[name]))
        scores.append(
            EvalScore(name=name, scorer=name, scored_samples=len(scored),
                      unscored_samples=sum(1 for s in samples if s.scores and name in s.scores) - len(scored),
                      metrics=metrics)
        )
    return EvalResults(
        total_samples=len(samples),
        completed_samples=sum(1 for s in samples if s.error is None),
        scores=scores,
    )


def eval_log(runs: Sequence[ExportRun], samples: list[EvalSample], finished: bool) -> EvalLog:
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSpec, EvalStats

    first = runs[0] if runs else ExportRun(None, "", "suite", 0, "", "", 1)
    models = list(dict.fromkeys(run.model for run in runs))
    ids = list(dict.fromkeys(str(sample.id) for sample in samples))
    starts = [s.started_at for s in samples if s.started_at]
    ends = [s.completed_at for s in samples if s.completed_at]
    usage: dict[str, ModelUsage] = {}
    for sample in samples:
        for name, used in sample.model_usage.items():
            usage[name] = usage[name] + used if name in usage else used.model_copy()
    spec = EvalSpec(
        eval_id=first.suite_id,
        run_id=first.suite_id,
        created=min(starts) if starts else isoformat(export_time()) or "",
        task=first.suite_name,
        task_id=first.suite_id,
        task_display_name=first.suite_name,
        solver="vouch",
        dataset=EvalDataset(name=first.suite_name, samples=len(ids), sample_ids=ids),
        # An eval log names one model; a suite's runs may have several, each named in its samples' metadata.
        model=models[0] if len(models) == 1 else ", ".join(models) or "none",
        config=EvalConfig(epochs=max((run.repeat for run in runs), default=1)),
        metadata={"vouch": {"suiteId": first.suite_id, "suiteName": first.suite_name, "models": models}},
    )
    return EvalLog(
        status="success" if finished else "started",
        eval=spec,
        results=_results(samples),
        stats=EvalStats(started_at=min(starts) if starts else "", completed_at=max(ends) if finished and ends else "",
                        model_usage=usage),
        samples=samples,
    )


async def inspect_export(session: AsyncSession, runs: Sequence[ExportRun]) -> AsyncIterator[bytes]:
    """The suite as an Inspect AI `.eval` log (a zip archive), one sample per run that has started; yielded in
    pieces of up to `READ_SIZE` bytes once Inspect has written it."""
    from inspect_ai.log import write_eval_log

    ids = SampleIds()
    samples: list[EvalSample] = []
    finished = True
    async for loaded in load_runs(session, runs, now=export_time()):
        if loaded.facts is None:
            finished = finished and loaded.run.state == "cancelled"
            continue
        finished = finished and loaded.facts.execution.status in FINAL
        samples.append(sample_of(loaded, ids.of(loaded.run)))
    log = eval_log(runs, samples, finished)
    del samples
    with tempfile.TemporaryDirectory(prefix="vouch-inspect-") as directory:
        path = os.path.join(directory, "suite.eval")
        # Inspect's synchronous writer, in a thread: it runs its own event loop there (none is running in it).
        await asyncio.to_thread(write_eval_log, log, path, "eval")
        del log
        with open(path, "rb") as written:  # noqa: ASYNC230  (read below in a thread, a piece at a time)
            while piece := await asyncio.to_thread(written.read, READ_SIZE):
                yield piece
