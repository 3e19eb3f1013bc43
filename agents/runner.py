"""Running one claimed execution: step by step, each step a committed transaction.

Every transaction starts by renewing the lease *and* checking the claim's epoch
(fencing): a worker that lost its lease, or an execution cancelled under it, stops at
its next step instead of writing over someone else's progress.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from agents import budgets, offline
from agents.claims import CLAIM_HOLDS, Claim, LeaseLost, NotTakenOver, claim_execution, fenced_allocation
from agents.gates import UNKNOWN_OUTCOME_STAGE, UNREVIEWED
from agents.model_names import ModelUnavailable, ProviderFailed
from agents.offline_steps import OfflineDriver
from agents.policy import RunMode
from agents.providers import ModelRegistry
from agents.tool_calls import Ending
from core.db import Database, commits_alone
from core.errors import ExecutionFailed, FailureCode, failure
from core.event_payloads import AgentMessage, ExecutionCompleted, TypedEvent
from core.events import append_event, append_events, seq_allocation
from core.logs import execution_context
from core.models import EXECUTIONS, Checkpoint, Execution, utcnow
from core.settings import Settings
from core.vocabulary import Channel, EventType
from core.webhooks import QUIET
from review import decide
from review.pausing import pause_for_review

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from agents.model_steps import ModelDriver

log = logging.getLogger(__name__)


# Renew the lease if the claim still holds.
_FENCE = (
    sa.update(EXECUTIONS)
    .where(EXECUTIONS.c.id == sa.bindparam("execution_id"), *CLAIM_HOLDS)
    .values(lease_until=sa.bindparam("renewed_until"))
)


# The fence of a claim's first transaction, handing back what the runner needs to go on.
_FENCE_AND_READ = _FENCE.returning(
    EXECUTIONS.c.agent_state,
    EXECUTIONS.c.agent_plan,
    EXECUTIONS.c.test_mode,
    EXECUTIONS.c.auto_detect_checkpoints,
)


_COMPLETED: dict[str, Any] = {
    "status": "completed",
    "completed_at": sa.bindparam("done_at"),
    "result": sa.bindparam("done_result"),
    "worker_id": None,
    "lease_until": None,
}
# The claim's fence, the execution completed and the seqs of its last events: one statement.
_FENCED_COMPLETION = seq_allocation(*CLAIM_HOLDS, **_COMPLETED)
# The same with the run's last step (its progress saved: agents/tool_calls.py `_FENCED_STEP`), unless a checkpoint
# still waits to be passed (`agents.gates.UNREVIEWED`): its review comes before the end.
_FENCED_LAST_STEP = fenced_allocation(
    ~sa.exists().where(*UNREVIEWED),
    agent_state=sa.bindparam("saved_state"),
    **_COMPLETED,
)


# The same, written alone (`core.events.append_events_alone`): only where the end calls for no webhook or verdict
# (`core.webhooks.QUIET`), which would have to commit with it.
_FENCED_QUIET_LAST_STEP = fenced_allocation(
    ~sa.exists().where(*UNREVIEWED),
    QUIET,
    agent_state=sa.bindparam("saved_state"),
    **_COMPLETED,
)


class AgentUnavailable(Exception):
    """The execution asks for an agent model this service cannot run."""


class ExecutionRunner:
    def __init__(
        self, settings: Settings, db: Database, worker_id: str, claim: Claim, models: ModelRegistry | None = None
    ) -> None:
        self.settings = settings
        self.db = db
        self.worker_id = worker_id
        self.claim = claim
        self.execution_id = claim.execution_id
        self._own_models = models is None
        self.models = models if models is not None else ModelRegistry(settings)

    async def run(self) -> None:
        # The agent runs in a task of its own so that the lease renewer can stop exactly it;
        # asyncio.wait tells the agent's cancellation apart from our own. Tasks copy the context:
        # every line either logs names this execution.
        with execution_context(self.execution_id):
            agent = asyncio.create_task(self._drive_or_fail())
            renewer = asyncio.create_task(self._renew_lease(agent))
        try:
            await asyncio.wait({agent})
        except asyncio.CancelledError:
            self.db.stop(agent)  # at once, or as its current transaction ends
            await asyncio.wait({agent})
            raise
        finally:
            self.db.stop(renewer)
            await asyncio.wait({renewer})
            if self._own_models:
                await self.models.aclose()

    async def _drive_or_fail(self) -> None:
        try:
            await self._drive()
        except LeaseLost:
            log.info("execution %s: lease lost, leaving it", self.execution_id)
        except ExecutionFailed as exc:
            # An outcome the agent chose (a task it cannot do, a budget used up), not a fault: no stack.
            log.info("execution %s failed: %s (%s)", self.execution_id, exc.code, exc.detail)
            await self._fail(exc)
        except Exception as exc:
            log.exception("execution %s failed", self.execution_id)
            await self._fail(exc)

    def fenced(self) -> dict[str, Any]:
        """The parameters of a statement fenced by CLAIM_HOLDS that renews the lease (`renewed_until`)."""
        return {
            "execution_id": self.execution_id,
            "claim_worker": self.worker_id,
            "claim_epoch": self.claim.epoch,
            "renewed_until": utcnow() + timedelta(seconds=self.settings.worker_lease_seconds),
        }

    async def fence(self, session: AsyncSession) -> None:
        renewed = await session.execute(_FENCE, self.fenced())
        if renewed.rowcount != 1:  # type: ignore[attr-defined]
            raise LeaseLost(self.execution_id)

    async def _renew_lease(self, agent: asyncio.Task[None]) -> None:
        while not agent.done():
            await asyncio.sleep(self.settings.worker_lease_seconds / 3)
            try:
                async with self.db.transaction() as session:
                    await self.fence(session)
            except LeaseLost:
                # Paused, finished, cancelled or taken over: a still-running agent must stop writing.
                self.db.stop(agent)
                return
            except Exception:
                log.warning("execution %s: lease renewal failed; retrying", self.execution_id, exc_info=True)

    async def _drive(self) -> None:
        if self.claim.resume is not None:
            # The first step takes the claim over, in its own statement, or nothing is written and the run is
            # claimed as usual: the row moved on since the decision, or the step takes more than one statement.
            try:
                await self._drive_from_entry()
                return
            except LeaseLost:
                if self.claim.resume is None:
                    raise  # taken over, then lost: as for any claim
                # NotTakenOver, or the step's statement matched nothing: the row moved on since the decision.
                log.debug("execution %s: not taken over by its first step; claiming it", self.execution_id)
            except Exception:
                if self.claim.resume is None:
                    raise  # taken over: the run's, as for any claim
                # Nothing written (the statement failed): the usual claim finds the run as it is.
                log.info("execution %s: its first step did not take the claim over; claiming it", self.execution_id,
                         exc_info=True)  # fmt: skip
            lease = self.settings.worker_lease_seconds
            claim = await claim_execution(self.db, self.worker_id, lease, self.execution_id)
            if claim is None:
                return  # another worker has it, or it no longer waits to run
            self.claim = claim
        await self._drive_from_entry()

    async def _drive_from_entry(self) -> None:
        entry = self.claim.entry
        if self.claim.resume is not None and (entry is None or entry.state is None):
            raise NotTakenOver(self.execution_id)
        if entry is not None:
            # The claim's own statement handed back what the agent needs to go on (its state, the run's mode):
            # getting back in after a pause costs no statement of its own.
            mode = RunMode(
                without_verification=entry.test_mode == "without-verification",
                gate_actions=entry.auto_detect_checkpoints,
            )
            state, plan, caller_pending, step_call = entry.state, entry.plan, entry.caller_pending, entry.step_call
        else:
            (mode, state, plan), caller_pending, step_call = await self._read_entry(), None, None
        if state is None:
            # The first claim: the state (and the offline agent's plan) is made, and written, under the fence.
            async with self.db.transaction() as session:
                await self.fence(session)
                state, plan = await self._enter(session)
        driver: OfflineDriver | ModelDriver
        if state["agent"] == offline.MODEL_NAME:
            driver = OfflineDriver(self, mode, offline.plan_of(state, plan), caller_pending, step_call)
        else:
            # Imported here, as in `_initial_state`: the model path loads pydantic_ai and the provider SDKs,
            # seconds of imports and tens of MB that a worker running only the offline agent never needs.
            from agents.model_steps import ModelDriver

            driver = ModelDriver(self, self._model(state["model"]), mode)
        async with self.db.keeping_alone():
            while True:
                budgets.enforce(state, self.settings)
                if not await driver.advance(state):
                    break

    async def _read_entry(self) -> tuple[RunMode, dict[str, Any] | None, offline.Steps | None]:
        """The entry of a claim that did not bring it (made by hand): read by the fence, in one statement."""
        async with self.db.transaction() as session:
            # One statement, committing by itself where it can; a state never made is written by a transaction of
            # its own (`_drive`), fenced again.
            await commits_alone(session)
            entry = (await session.execute(_FENCE_AND_READ, self.fenced())).first()
            if entry is None:
                raise LeaseLost(self.execution_id)
        mode = RunMode(
            without_verification=entry.test_mode == "without-verification",
            gate_actions=entry.auto_detect_checkpoints,
        )
        state = None if entry.agent_state is None else dict(entry.agent_state)
        return mode, state, None if entry.agent_plan is None else list(entry.agent_plan)

    async def _enter(self, session: AsyncSession) -> tuple[dict[str, Any], offline.Steps | None]:
        """The agent's state at the start of its first claim, and the offline agent's plan, made and written."""
        execution = await session.get_one(Execution, self.execution_id)
        state, plan = self._initial_state(execution, await self.checkpoints(session))
        execution.agent_state, execution.agent_plan = state, plan
        if plan is not None:
            said: AgentMessage = {"text": offline.plan_message(plan)}
            await append_event(session, self.execution_id, EventType.AGENT_MESSAGE, said)
        return state, plan

    def _model(self, name: str) -> Model:
        try:
            return self.models.get(name)
        except ModelUnavailable as exc:
            raise AgentUnavailable(str(exc)) from None

    def _initial_state(
        self, execution: Execution, checkpoints: list[Checkpoint]
    ) -> tuple[dict[str, Any], offline.Steps | None]:
        """The agent's first state, and the offline agent's plan (None for a model's)."""
        # The budget is fixed when the run starts: a later change of the settings does not move it.
        budget, usage = budgets.from_settings(self.settings), budgets.no_usage()
        if execution.agent_model == offline.MODEL_NAME:
            caller = [cp for cp in checkpoints if cp.origin == "caller"]
            state, plan = offline.initial_state(execution.task_description, caller)
            return {**state, "budget": budget, "usage": usage}, plan
        self._model(execution.agent_model)  # a model this worker cannot run fails the execution before it starts
        from agents import llm

        return {
            "agent": "model",
            "model": execution.agent_model,
            "messages": llm.dump([llm.first_request(execution, checkpoints)]),
            "pending": [],
            "returns": [],
            "nextStep": 0,
            "budget": budget,
            "usage": usage,
        }, None

    async def checkpoints(self, session: AsyncSession) -> list[Checkpoint]:
        rows = await session.scalars(
            sa.select(Checkpoint).where(Checkpoint.execution_id == self.execution_id).order_by(Checkpoint.position)
        )
        return list(rows)

    async def save(self, session: AsyncSession, state: dict[str, Any]) -> None:
        await session.execute(
            sa.update(Execution).where(Execution.id == self.execution_id).values(agent_state=dict(state))
        )

    async def pass_or_pause(
        self,
        session: AsyncSession,
        checkpoint: Checkpoint,
        next_action: dict[str, Any],
        mode: RunMode,
        guards: dict[str, Any] | None = None,
    ) -> bool:
        """Without verification the checkpoint is recorded auto-approved and the agent goes on (True);
        with it, the execution pauses here (False)."""
        if mode.without_verification:
            await decide(session, checkpoint.id, "approve", by="vouch", via=Channel.AUTO)
            return True
        await self.pause(session, checkpoint, next_action, guards)
        return False

    async def pause(
        self,
        session: AsyncSession,
        checkpoint: Checkpoint,
        next_action: dict[str, Any],
        guards: dict[str, Any] | None = None,
    ) -> None:
        """`guards`, when the agent knows it, is the step the checkpoint was bound to ({step, tool, instruction}):
        the reviewer's approval lets exactly that step (or, with tool "finish", the finish) through."""
        # A reviewer may edit the arguments of the call this checkpoint gates: its approval lets exactly that
        # call run (agents/call_edits.py `take_edits` applies the edits). Not a crash's "run it again?" question.
        editable = (
            checkpoint.tool_call_id is not None
            and next_action.get("toolCallId") == checkpoint.tool_call_id
            and checkpoint.stage != UNKNOWN_OUTCOME_STAGE
        )
        next_action = {**next_action, "editable": editable}
        await pause_for_review(session, self.settings, self.execution_id, checkpoint, next_action, guards)

    async def complete(self, session: AsyncSession, result: dict[str, Any]) -> None:
        """The execution completed and its last events, in one statement fenced by the claim (LeaseLost if not)."""
        events, parameters = self._completion(result)
        added = await append_events(
            session,
            self.execution_id,
            events,
            allocation=_FENCED_COMPLETION,
            parameters={**self.fenced(), **parameters},
        )
        if added is None:
            raise LeaseLost(self.execution_id)

    def ending(self, result: dict[str, Any], *, alone: bool = False) -> Ending | None:
        """The execution completed with `result`, written by the statement of its last step (agents/tool_calls.py);
        `alone`, by that statement committing by itself, which matches no row where the end calls for a webhook or
        a verdict (the next turn ends the run then). None where the end cannot be written alone (traces on)."""
        if alone and self.db.traces:
            return None
        events, parameters = self._completion(result)
        return Ending(events, _FENCED_QUIET_LAST_STEP if alone else _FENCED_LAST_STEP, parameters)

    def _completion(self, result: dict[str, Any]) -> tuple[tuple[TypedEvent, ...], dict[str, Any]]:
        # `output` is the agent's final answer (issue 23), what scorers judge: the model's finish text, the
        # rule-based agent's summary.
        result = {**result, "output": result.get("output", result["summary"])}
        said: AgentMessage = {"text": result["summary"]}
        completed: ExecutionCompleted = {"status": "completed", "result": result}
        events: tuple[TypedEvent, ...] = ((EventType.AGENT_MESSAGE, said), (EventType.EXECUTION_COMPLETED, completed))
        return events, {"done_at": utcnow(), "done_result": result}

    async def _fail(self, exc: Exception) -> None:
        error = failure_of(exc)
        message = error["detail"]
        try:
            async with self.db.transaction() as session:
                await self.fence(session)
                await session.execute(
                    sa.update(Execution)
                    .where(Execution.id == self.execution_id)
                    .values(
                        status="failed",
                        completed_at=utcnow(),
                        error=message,
                        error_info=error,
                        worker_id=None,
                        lease_until=None,
                    )
                )
                await append_event(
                    session, self.execution_id, EventType.EXECUTION_FAILED, {"status": "failed", "error": error}
                )
        except LeaseLost:
            pass


def failure_of(exc: Exception) -> dict[str, Any]:
    """The error object (core/errors.py) a failed execution is stored and served with."""
    if isinstance(exc, ExecutionFailed):
        return exc.as_json()
    if isinstance(exc, AgentUnavailable | ModelUnavailable):
        return failure(FailureCode.MODEL_UNAVAILABLE, str(exc))
    if isinstance(exc, ProviderFailed):
        return failure(FailureCode.PROVIDER_FAILED, str(exc))
    return failure(FailureCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
