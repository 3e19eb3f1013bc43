"""A LangGraph agent whose graph outlives its process (LangGraph's SQLite checkpointer, in a file), run by
test_langgraph.py's restart test:

    python langgraph_process.py <url> <key> <execution id> <graph.sqlite> <thread id> <sent.jsonl> start|resume

`start` runs the graph up to its Vouch interrupt and waits there for the reviewer (the test kills it while it
waits); `resume` is the agent started again with the same keys and thread: it asks the pending checkpoint again
(by its key, the interrupt's id), goes on with the decision and completes the run. Each mail sent is a line in
<sent.jsonl>; prints the graph's final state as one JSON line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from vouch_client import Client
from vouch_client.adapters.langgraph import invoke, request_approval, resume

MAIL = {"to": "team@example.com", "subject": "v2"}


class State(TypedDict, total=False):
    mail: dict[str, Any]
    outcome: str


def mail_graph(saver: SqliteSaver, sent: Path) -> Any:
    def send(state: State) -> State:
        approval = request_approval("Send", "Send this mail?", tool="send_mail", args=state["mail"])
        if not approval["approved"]:
            return {"outcome": f"not sent: {approval['comment']}"}
        with sent.open("a") as mails:
            mails.write(json.dumps(approval["args"]) + "\n")
        return {"outcome": f"sent to {approval['args']['to']}: {approval['args']['subject']}"}

    builder = StateGraph(State)
    builder.add_node("send", send)
    builder.add_edge(START, "send")
    builder.add_edge("send", END)
    return builder.compile(checkpointer=saver)


def main(base: str, key: str, execution_id: str, database: str, thread_id: str, sent: str, step: str) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    with SqliteSaver.from_conn_string(database) as saver, Client(base, key) as vouch:
        run = vouch.attach(execution_id)
        graph = mail_graph(saver, Path(sent))
        final = invoke(run, graph, {"mail": MAIL}, config) if step == "start" else resume(run, graph, config)
        run.complete({"output": final["outcome"]})
    print(json.dumps(final))


if __name__ == "__main__":
    main(*sys.argv[1:8])
