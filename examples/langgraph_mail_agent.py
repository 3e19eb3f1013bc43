"""A LangGraph agent whose mail-sending tool waits for a human in Vouch.

The agent (a model node and a tool node) drafts a release mail; before `send_mail` runs, the graph interrupts,
Vouch asks the reviewer (mail, inbox, live chat, API, CLI) and the graph goes on with the decision: sent with the
reviewer's edits, or not sent with their comment, which the model reads.

Offline, against a local Vouch (the README's quick start), with a scripted model and a local SMTP catcher:

    pip install './vouch-client[langgraph]'
    python -m aiosmtpd -n -l 127.0.0.1:8025 &                 # prints the mail the tool sends
    VOUCH_URL=http://127.0.0.1:8000 VOUCH_API_KEY=svc_eval_… VOUCH_REVIEWER=you@example.com \\
        python examples/langgraph_mail_agent.py
    # the reviewer decides: the link in their mail, the chat page, or `vouch-client tasks watch <id>`

For a real model, replace `scripted_model()` with any chat model that calls tools (e.g. `init_chat_model(…)`
bound to `[send_mail]`).
"""

from __future__ import annotations

import os
import smtplib
import uuid
from email.message import EmailMessage
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from vouch_client import Client
from vouch_client.adapters.langgraph import invoke, request_approval

SMTP = (os.environ.get("SMTP_HOST", "127.0.0.1"), int(os.environ.get("SMTP_PORT", "8025")))


def send_mail(to: str, subject: str, body: str) -> str:
    mail = EmailMessage()
    mail["From"], mail["To"], mail["Subject"] = "agent@example.com", to, subject
    mail.set_content(body)
    with smtplib.SMTP(*SMTP) as smtp:
        smtp.send_message(mail)
    return f"sent to {to}"


def scripted_model() -> GenericFakeChatModel:
    """What a model would answer, without one: a call of send_mail, then a last word."""
    call = {"name": "send_mail", "id": "call-1",
            "args": {"to": "team@example.com", "subject": "v2", "body": "Version 2 is out."}}
    return GenericFakeChatModel(messages=iter([AIMessage("", tool_calls=[call]), AIMessage("Done.")]))


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def build_graph(model: Any) -> Any:
    def agent(state: State) -> State:
        return {"messages": [model.invoke(state["messages"])]}

    def tools(state: State) -> State:
        answers: list[AnyMessage] = []
        for call in state["messages"][-1].tool_calls:  # type: ignore[union-attr]
            approval = request_approval("Send", "Send this mail?", tool=call["name"], args=call["args"])
            if approval["approved"]:
                result = send_mail(**approval["args"])  # the arguments as the reviewer left them
            else:
                result = f"not sent: the reviewer said {approval['comment']!r}"
            answers.append(ToolMessage(result, tool_call_id=call["id"]))
        return {"messages": answers}

    def next_step(state: State) -> str:
        return "tools" if state["messages"][-1].tool_calls else END  # type: ignore[union-attr]

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", next_step, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver())  # interrupts need a checkpointer


def main() -> None:
    task = {"taskName": "Release mail", "taskDescription": "Mail the v2 note to the team.",
            "assignedReviewer": os.environ["VOUCH_REVIEWER"]}
    with Client(os.environ.get("VOUCH_URL", "http://127.0.0.1:8000"), os.environ["VOUCH_API_KEY"]) as vouch:
        run = vouch.start_external(task)
        print(f"execution {run.execution_id}: waiting for the reviewer", flush=True)
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}
        final = invoke(run, build_graph(scripted_model()),
                       {"messages": [HumanMessage("Mail the team about v2")]}, config)  # type: ignore[arg-type]
        answer = str(final["messages"][-1].content)
        run.complete({"output": answer})
        print(f"{answer} ({final['messages'][-2].content})")


if __name__ == "__main__":
    main()
