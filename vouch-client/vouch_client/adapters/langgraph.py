"""LangGraph: a node's `interrupt` answered by Vouch's reviewer (`pip install 'vouch-client[langgraph]'`).

Inside a node, `request_approval` interrupts the graph with the call it wants to make; `invoke` (or `ainvoke`)
runs the graph and turns each such interrupt into a Vouch checkpoint, waits for the reviewer on any channel
(mail, inbox, chat, API) and resumes the graph with `Command(resume=…)` carrying the decision:

    def send(state: State) -> State:
        approval = request_approval("Send", "Send this mail?", tool="send_mail", args=state["mail"])
        if not approval["approved"]:
            return {"outcome": f"not sent: {approval['comment']}"}
        return {"outcome": send_mail(**approval["args"])}        # the reviewer's edits applied

    graph = builder.compile(checkpointer=InMemorySaver())        # interrupts need a checkpointer
    with Client(url, key) as vouch:
        run = vouch.start_external(task)
        final = invoke(run, graph, {"mail": {...}}, {"configurable": {"thread_id": run.execution_id}})
        run.complete({"output": final["outcome"]})

Each checkpoint's key is the interrupt's id, which LangGraph keeps in the graph's saved state: after a restart,
`resume(run, graph, config)` with a durable checkpointer asks the same checkpoints and gets the decisions made
meanwhile. Interrupts that are not Vouch's are left pending for the caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypedDict, cast

from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel
from langgraph.types import Command, Interrupt, interrupt

from vouch_client.external import AsyncExternalRun, ExternalRun
from vouch_client.external_calls import CheckpointDecision

# The interrupt value's marker: what tells a Vouch interrupt from the graph's others.
MARKER = "vouch_checkpoint"


class Approval(TypedDict):
    """What `request_approval` returns once the reviewer decided."""

    approved: bool
    decision: str
    args: dict[str, Any]  # the proposed arguments with the reviewer's edits applied
    comment: str
    by: str | None
    via: str | None


def request_approval(
    stage: str, question: str, *, tool: str, args: Mapping[str, Any], description: str = ""
) -> Approval:
    """In a node: pause the graph until Vouch's reviewer decides on calling `tool` with `args`.

    As with any `interrupt`, the node runs again from its start when the graph resumes, so put what must
    not happen twice after this call."""
    request = {"stage": stage, "question": question, "description": description,
               "action": {"tool": tool, "args": dict(args)}}
    return cast(Approval, interrupt({MARKER: request}))


def _ours(interrupts: Iterable[Interrupt]) -> list[Interrupt]:
    return [i for i in interrupts if isinstance(i.value, Mapping) and MARKER in i.value]


def _question(pending: Interrupt) -> dict[str, Any]:
    request = pending.value[MARKER]
    return {"stage": request["stage"], "question": request["question"], "action": request["action"],
            "description": request.get("description", ""), "key": f"langgraph:{pending.id}"}


def _approval(decision: CheckpointDecision) -> Approval:
    return {"approved": decision.approved, "decision": decision.decision or "", "args": decision.args,
            "comment": decision.comment or "", "by": decision.by, "via": decision.via}


def invoke(run: ExternalRun, graph: Pregel[Any, Any, Any, Any], input: Any, config: RunnableConfig) -> Any:
    """Run the graph to its end, each Vouch interrupt answered by the reviewer; returns the graph's output."""
    graph.invoke(input, config)
    return resume(run, graph, config)


def resume(run: ExternalRun, graph: Pregel[Any, Any, Any, Any], config: RunnableConfig) -> Any:
    """Answer the graph's pending Vouch interrupts (asked again by key after a restart) until none is left."""
    while pending := _ours(graph.get_state(config).interrupts):
        answers = {i.id: _approval(run.checkpoint(**_question(i))) for i in pending}
        graph.invoke(Command(resume=answers), config)
    return graph.get_state(config).values


async def ainvoke(
    run: AsyncExternalRun, graph: Pregel[Any, Any, Any, Any], input: Any, config: RunnableConfig
) -> Any:
    """As `invoke`, with the asyncio client and the graph's `ainvoke`."""
    await graph.ainvoke(input, config)
    return await aresume(run, graph, config)


async def aresume(run: AsyncExternalRun, graph: Pregel[Any, Any, Any, Any], config: RunnableConfig) -> Any:
    """As `resume`, with the asyncio client."""
    while pending := _ours((await graph.aget_state(config)).interrupts):
        answers = {i.id: _approval(await run.checkpoint(**_question(i))) for i in pending}
        await graph.ainvoke(Command(resume=answers), config)
    return (await graph.aget_state(config)).values
