// The chat page's items: how one event becomes (or updates) an item in the feed, the status line and the
// cards. Items are clones of the page's own <template>s (the Jinja macros that rendered the history), filled
// through textContent only: nothing from an event is ever parsed as HTML, except the agent's own text, which
// markdown.js renders and sanitises. It follows the folding rules of chat/conversation.py; keep the two in step.
// chat.js owns ordering, the socket and scrolling.
"use strict";
import { renderMarkdown } from "./markdown.js";

const STATUS_TEXT = {
  queued: "Queued: waiting for a worker",
  running: "Running",
  awaiting_review: "Waiting for review",
  completed: "Completed",
  failed: "Failed",
  rejected: "Rejected",
  cancelled: "Cancelled",
};
// The server's words (core/vocabulary.py), handed over in the page's JSON block: no copy to drift here.
const VOCABULARY = JSON.parse(document.getElementById("vocabulary").textContent);
const EVENT = VOCABULARY.eventTypes;
// execution.completed → completed, …: the event that ends a run, and the status it ends in.
const OUTCOMES = VOCABULARY.outcomes;
// The tab's title leads with the state, so a background tab says when it needs you.
const TITLE_STATE = {
  queued: "Queued",
  running: "Running",
  awaiting_review: "Waiting for review",
  completed: "Completed",
  failed: "Failed",
  rejected: "Rejected",
  cancelled: "Cancelled",
};
const NOTIFY_KEY = "vouch.notify";
const OUTCOME_TITLES = {
  completed: "Task completed",
  failed: "Task failed",
  rejected: "Stopped: a checkpoint was rejected",
  cancelled: "Task cancelled",
};

function clockOf(iso) {
  const moment = new Date(iso);
  if (Number.isNaN(moment.getTime())) {
    return "";
  }
  return moment.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });
}

function localizeTime(element) {
  if (element.dateTime) {
    element.textContent = clockOf(element.dateTime);
    element.title = new Date(element.dateTime).toLocaleString();
  }
}

function duration(ms) {
  if (ms === null || ms === undefined) {
    return "—";
  }
  const value = Number(ms);
  if (value < 1000) {
    return `${Math.round(value)} ms`;
  }
  const seconds = value / 1000;
  if (seconds < 60) {
    return `${(Math.floor(seconds * 10 + 0.5) / 10).toFixed(1)} s`;
  }
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) {
    return `${minutes} min ${String(Math.floor(seconds % 60)).padStart(2, "0")} s`;
  }
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, "0")} min`;
}

function pretty(value) {
  return JSON.stringify(value === undefined ? null : value, null, 2);
}

export function slot(element, name) {
  return element.querySelector(`[data-slot="${name}"]`);
}

function fill(element, name, value) {
  const target = slot(element, name);
  if (target) {
    target.textContent = value === null || value === undefined ? "" : String(value);
  }
  return target;
}

function fillOptional(element, name, value) {
  const target = fill(element, name, value);
  if (target) {
    target.hidden = !value;
  }
}

function showPart(element, name, shown) {
  element.querySelectorAll(`[data-part="${name}"]`).forEach((part) => {
    part.hidden = !shown;
  });
}

// An argument as the reviewer reads and edits it: text as it is, anything else as JSON (chat/conversation.py).
export function argumentText(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

// One argument as a row of a <dl>, its whole text in a <pre>. Text only.
function argumentRow(name, text) {
  const row = document.createElement("div");
  const term = document.createElement("dt");
  const code = document.createElement("code");
  code.textContent = name;
  term.appendChild(code);
  const detail = document.createElement("dd");
  const pre = document.createElement("pre");
  pre.textContent = text;
  detail.appendChild(pre);
  row.append(term, detail);
  return row;
}

// The arguments an approval changed (none for a rejection or a plain approval); chat/conversation.py's _edits.
function editsOf(decided) {
  const edited = decided.editedArgs;
  return decided.decision === "approve" && edited && typeof edited === "object" ? edited : {};
}

// Every argument of the proposed call in full, and one field per argument in the edit form. Text only.
function fillArguments(card, args, editable) {
  const list = slot(card, "nextArgs");
  const fields = slot(card, "editFields");
  for (const [name, value] of Object.entries(args)) {
    const text = argumentText(value);
    list.appendChild(argumentRow(name, text));
    if (!editable) {
      continue;
    }
    const label = document.createElement("label");
    label.className = "cp-arg";
    const labelCode = document.createElement("code");
    labelCode.textContent = name;
    const area = document.createElement("textarea");
    area.dataset.arg = name;
    area.rows = Math.min(Math.max(text.split("\n").length, 2), 8);
    area.defaultValue = text;
    const error = document.createElement("span");
    error.className = "cp-arg-error";
    error.dataset.argError = name;
    error.setAttribute("role", "alert");
    error.hidden = true;
    label.append(labelCode, area, error);
    fields.appendChild(label);
  }
}

function fromTemplate(kind, message) {
  const element = document.getElementById(`tpl-${kind}`).content.firstElementChild.cloneNode(true);
  element.dataset.seq = String(message.seq);
  const time = element.querySelector('time[data-slot="at"]');
  if (time && message.at) {
    time.dateTime = message.at;
    localizeTime(time);
  }
  return element;
}

/** The feed, the status line and the cards of one chat page; `needState` asks the server for a fresh state. */
export function createView(root, needState) {
  const feed = document.getElementById("feed");
  const statusBar = document.getElementById("statusbar");
  const statusText = document.getElementById("status-text");
  const conn = document.getElementById("conn");
  const taskName = document.getElementById("task-name").textContent;
  const tools = new Map();
  const cards = new Map();
  const view = {
    canDecide: root.dataset.canDecide === "true",
    final: root.dataset.final === "true",
    reviewer: root.dataset.reviewer || "",
  };

  function setStatus(status, text) {
    statusBar.className = `statusbar status-${status}`;
    let shown = text || STATUS_TEXT[status] || status;
    if (!text && status === "awaiting_review" && view.reviewer) {
      shown = `Waiting for review by ${view.reviewer}`;
    }
    statusText.textContent = shown;
    root.dataset.status = status;
    view.final = ["completed", "failed", "rejected", "cancelled"].includes(status);
    root.dataset.final = String(view.final);
    setTitle();
  }

  function setTitle() {
    const status = root.dataset.status;
    const state = status === "awaiting_review" && view.canDecide ? "Waiting for your review" : TITLE_STATE[status];
    document.title = [state, taskName, "Vouch"].filter(Boolean).join(" · ");
  }

  // ---- the model's text as it is written: one bubble per answer, gone when the stored message arrives -------

  let streaming = null;
  const closedStreams = new Set();

  function endStream() {
    if (streaming) {
      closedStreams.add(streaming.id);
      streaming.element.remove();
      streaming = null;
    }
  }

  // A delta ({stream, index, text}) is never stored: the stored agent.message replaces the whole bubble, so a
  // delta lost or late costs nothing but a moment's view.
  function streamText(delta) {
    if (!delta || typeof delta.stream !== "string" || typeof delta.text !== "string" || view.final) {
      return false;
    }
    if (closedStreams.has(delta.stream)) {
      return false;
    }
    if (!streaming || streaming.id !== delta.stream) {
      endStream();
      const element = document.getElementById("tpl-message").content.firstElementChild.cloneNode(true);
      element.classList.add("streaming");
      element.removeAttribute("data-seq");
      element.querySelector('time[data-slot="at"]').remove();
      streaming = { id: delta.stream, element, text: "", next: 0, drawn: false };
      feed.appendChild(element);
    }
    if (delta.index < streaming.next) {
      return false; // a repeat
    }
    // One lost on the way leaves a gap for a moment: the stored message will say it all.
    streaming.next = delta.index + 1;
    streaming.text += delta.text;
    if (!streaming.drawn) {
      // Rendered once per frame, however many tokens arrive in it.
      streaming.drawn = true;
      const current = streaming;
      requestAnimationFrame(() => {
        current.drawn = false;
        renderMarkdown(slot(current.element, "text"), current.text);
      });
    }
    return true;
  }

  // ---- a card that starts waiting for you: an opt-in browser notification ---------------------------------

  const notifyButton = document.getElementById("notify");

  function notifyWanted() {
    return "Notification" in window && Notification.permission === "granted" && localStorage.getItem(NOTIFY_KEY) === "on";
  }

  function showNotifyButton() {
    if (!notifyButton) return;
    notifyButton.hidden = !("Notification" in window) || !view.canDecide || view.final;
    const on = notifyWanted();
    notifyButton.setAttribute("aria-pressed", String(on));
    notifyButton.textContent = on ? "Notifications on" : "Notify me when a review waits";
  }

  if (notifyButton) {
    notifyButton.addEventListener("click", async () => {
      if (notifyWanted()) {
        localStorage.setItem(NOTIFY_KEY, "off");
      } else {
        const permission = await Notification.requestPermission();
        localStorage.setItem(NOTIFY_KEY, permission === "granted" ? "on" : "off");
      }
      showNotifyButton();
    });
  }

  function notifyWaiting(stage) {
    if (!view.canDecide || !notifyWanted()) {
      return;
    }
    const note = new Notification("Waiting for your review", { body: `${stage} · ${taskName}`, tag: root.dataset.executionId });
    note.addEventListener("click", () => {
      window.focus();
      note.close();
    });
  }

  function setConn(state, text) {
    conn.dataset.conn = state;
    conn.textContent = text;
  }

  function refreshCard(card) {
    const decided = card.dataset.decided === "true";
    // A grade (the human scorer's "Grade the result") is asked once the run has ended.
    const open = !decided && (!view.final || card.dataset.origin === "grade");
    const form = card.querySelector('[data-part="form"]');
    if (form) {
      form.hidden = !(open && view.canDecide);
    }
    showPart(card, "waiting", open && !view.canDecide);
    if (!decided && view.final) {
      fill(card, "stateText", "Not decided");
    }
    fill(card, "reviewer", view.reviewer || "the reviewer");
    // Focusable while it waits for this reader, for its keys (a: approve, r: reject): chat.js listens.
    if (open && view.canDecide) {
      card.querySelector(".checkpoint").tabIndex = 0;
    } else {
      card.querySelector(".checkpoint").removeAttribute("tabindex");
    }
  }

  function refreshCards() {
    cards.forEach(refreshCard);
    showNotifyButton();
    setTitle();
  }

  function markDecided(card, decision) {
    card.dataset.decided = "true";
    const state = decision.decision === "approve" ? "approved" : "rejected";
    card.querySelector(".checkpoint").className = `checkpoint state-${state}`;
    fill(card, "stateText", state === "approved" ? "Approved" : "Rejected");
    const verdict = decision.decision === "approve" ? "Approved" : "Rejected";
    fill(card, "decidedBy", `${verdict} by ${decision.by} via ${decision.via}`);
    const at = slot(card, "decidedAt");
    at.dateTime = decision.at;
    localizeTime(at);
    showPart(card, "decided", true);
    refreshCard(card);
  }

  function setMetrics(metrics) {
    const outcomes = feed.querySelectorAll(".item.outcome");
    const outcome = outcomes[outcomes.length - 1];
    if (!outcome || !metrics) {
      return;
    }
    outcome.querySelectorAll("[data-metric]").forEach((cell) => {
      const value = metrics[cell.dataset.metric];
      cell.textContent = cell.hasAttribute("data-count") ? String(value ?? "—") : duration(value);
    });
    showPart(outcome, "metrics", true);
  }

  function systemText(type, payload) {
    switch (type) {
      case EVENT.EXECUTION_CREATED:
        return "Task created";
      case EVENT.EXECUTION_STARTED:
        return "The agent started";
      case EVENT.EXECUTION_RESUMED:
        return "The agent resumed";
      case EVENT.EXECUTION_UPDATED:
        return `${payload.field || "A setting"} changed to ${payload.to || "nothing"} by ${payload.by || "the owner"}`;
      case EVENT.CHECKPOINT_DECIDED:
        return "A checkpoint passed without review (test mode: without verification)";
      case EVENT.CHECKPOINT_REVISION_REQUESTED:
        return `Attempt ${payload.attempt} rejected: the agent revises and asks again (attempt ${payload.nextAttempt})`;
      case EVENT.REVIEW_REMINDER_SENT:
        return `Reminder sent to ${payload.to}`;
      case EVENT.REVIEW_ESCALATED:
        return `Escalated to the backup reviewer ${payload.to}`;
      case EVENT.REVIEW_DEADLINE_PASSED:
        return `The review deadline passed: ${payload.policy} applies`;
      case EVENT.MAIL_FAILED:
        return `Mail to ${payload.to} could not be sent: ${payload.reason}`;
      case EVENT.MODEL_REQUEST: {
        const seconds = (Number(payload.durationMs) || 0) / 1000;
        const cost = typeof payload.costUsd === "number" ? `, $${payload.costUsd.toFixed(4)}` : "";
        return `Asked ${payload.model || "the model"}: ${payload.inputTokens || 0} tokens in, ` +
          `${payload.outputTokens || 0} out, ${seconds.toFixed(1)} s${cost}`;
      }
      case EVENT.EXECUTION_SCORED: {
        const said = payload.passed === true ? "passed" : payload.passed === false ? "failed" : "undecided";
        const score = typeof payload.score === "number" ? ` (score ${payload.score.toFixed(2)})` : "";
        return `Verdict: ${said}${score}`;
      }
      default:
        return null;
    }
  }

  // The step a checkpoint is bound to; templates/chat/_items.html's guards_text says the same.
  function guardsText(guards) {
    if (!guards) return "";
    if (guards.step) return `step ${guards.step}, ${guards.tool}: ${guards.instruction}`;
    return "the finish: passed before the task completes";
  }

  function outcomeOf(status, payload) {
    const result = payload.result || {};
    let detail = "";
    if (status === "completed" && (result.unrecognised || []).length) {
      detail = `Skipped, not understood: ${result.unrecognised.join("; ")}`;
    } else if (status === "failed") {
      // {code, detail, ...} since failures have codes; a plain string in events recorded before.
      const error = payload.error;
      detail = error && typeof error === "object" ? String(error.detail || error.code || "") : String(error || "");
    } else if (status === "rejected") {
      detail = `Rejected by ${payload.by || "the reviewer"}; the agent did nothing after that checkpoint.`;
    } else if (status === "cancelled" && payload.by) {
      detail = `Cancelled by ${payload.by}`;
    }
    return { title: OUTCOME_TITLES[status], detail, steps: (result.steps || []).map(String) };
  }

  // Returns the new list item, or null when the event only updated one already shown.
  function render(message) {
    const type = message.type;
    const payload = message.payload || {};
    let element = null;
    if (type === EVENT.AGENT_MESSAGE || type === EVENT.MODEL_REQUEST || OUTCOMES[type]) {
      // The stored answer (or the end) is here: the bubble that showed it being written goes.
      endStream();
    }
    if (type === EVENT.AGENT_MESSAGE) {
      element = fromTemplate("message", message);
      renderMarkdown(slot(element, "text"), payload.text);
    } else if (type === EVENT.TOOL_CALL) {
      element = fromTemplate("tool", message);
      element.dataset.toolCallId = payload.toolCallId;
      fill(element, "tool", payload.tool);
      fill(element, "argsText", pretty(payload.args || {}));
      showPart(element, "world", Boolean(payload.actsOnWorld));
      tools.set(payload.toolCallId, element);
    } else if (type === EVENT.TOOL_RESULT) {
      const call = tools.get(payload.toolCallId);
      if (call) {
        const failed = payload.error !== undefined && payload.error !== null;
        call.classList.add("done");
        call.classList.toggle("failed", failed);
        fill(call, "state", `${failed ? "failed" : "done"} in ${duration(payload.durationMs)}`);
        fill(call, "resultText", failed ? String(payload.error) : pretty(payload.result));
        showPart(call, "result", true);
      }
    } else if (type === EVENT.CHECKPOINT_AWAITING_REVIEW) {
      const next = payload.nextAction || {};
      element = fromTemplate("card", message);
      element.dataset.checkpointId = payload.checkpointId;
      element.dataset.decided = "false";
      element.dataset.origin = payload.origin || "";
      element.dataset.callId = payload.toolCallId || "";
      if (payload.origin === "grade") {
        // The human scorer's "Grade the result": approve is a pass, reject a fail.
        element.querySelector("button[value=approve]").textContent = "Pass";
        element.querySelector("button[value=reject]").textContent = "Fail";
      }
      fill(element, "stage", payload.stage);
      fillOptional(element, "description", payload.description);
      fill(element, "verificationQuestion", payload.verificationQuestion);
      fill(element, "instruction", next.instruction);
      fill(element, "guardsText", guardsText(payload.guards));
      showPart(element, "guards", Boolean(payload.guards));
      fill(element, "nextTool", next.tool);
      fillArguments(element, next.args || {}, Boolean(next.editable));
      showPart(element, "edit", Boolean(next.editable));
      showPart(element, "noComments", payload.readsComments === false);
      showPart(element, "noCommentsEdit", Boolean(next.editable));
      showPart(element, "auto", payload.origin === "auto");
      fill(element, "attempt", payload.attempt || 1);
      showPart(element, "attempt", (payload.attempt || 1) > 1);
      cards.set(payload.checkpointId, element);
      refreshCard(element);
      if (payload.origin !== "grade") {
        setStatus("awaiting_review");
      }
      notifyWaiting(payload.stage);
    } else if (type === EVENT.CHECKPOINT_DECIDED && payload.via !== "auto") {
      const card = cards.get(payload.checkpointId);
      if (card) {
        markDecided(card, payload);
      }
      element = fromTemplate("reply", message);
      element.classList.add(payload.decision);
      fill(element, "by", payload.by);
      fill(element, "via", payload.via);
      fill(element, "verdict", payload.decision === "approve" ? "Approved" : "Rejected");
      fill(element, "initial", (payload.by || "?").slice(0, 1).toUpperCase());
      const stage = card ? slot(card, "stage").textContent : "";
      fill(element, "stage", stage);
      showPart(element, "stage", Boolean(stage));
      fillOptional(element, "comment", payload.comment);
      const edits = editsOf(payload);
      if (Object.keys(edits).length) {
        const list = slot(element, "editedArgs");
        for (const [name, value] of Object.entries(edits)) {
          list.appendChild(argumentRow(name, argumentText(value)));
        }
        showPart(element, "edits", true);
        // The call ran with the edits: its arguments as run, the agent's proposal beside them.
        const call = card && card.dataset.callId ? tools.get(card.dataset.callId) : null;
        if (call) {
          const proposed = payload.originalArgs || {};
          fill(call, "argsText", pretty({ ...proposed, ...edits }));
          fill(call, "proposedText", pretty(proposed));
          showPart(call, "edited", true);
          showPart(call, "proposed", true);
        }
      }
      if (payload.decision === "approve") {
        setStatus("running");
      }
    } else if (OUTCOMES[type]) {
      const status = OUTCOMES[type];
      const outcome = outcomeOf(status, payload);
      element = fromTemplate("outcome", message);
      element.querySelector(".outcome-card").className = `outcome-card status-${status}`;
      fill(element, "title", outcome.title);
      fillOptional(element, "detail", outcome.detail);
      const list = slot(element, "steps");
      outcome.steps.forEach((step) => {
        const line = document.createElement("li");
        line.textContent = step;
        list.appendChild(line);
      });
      list.hidden = outcome.steps.length === 0;
      setStatus(status);
      refreshCards();
      // The metrics are the server's to compute (the same numbers as the status API): ask for them.
      needState();
    } else {
      const text = systemText(type, payload);
      if (text !== null) {
        element = fromTemplate("system", message);
        fill(element, "text", text);
      }
      if (type === EVENT.EXECUTION_STARTED || type === EVENT.EXECUTION_RESUMED) {
        setStatus("running");
      } else if (type === EVENT.EXECUTION_UPDATED && payload.field === "assignedReviewer") {
        view.reviewer = payload.to || "";
        document.getElementById("reviewer").textContent = view.reviewer || "none";
        // Whether this watcher may decide may have changed with the reviewer: the server says.
        needState();
      }
    }
    if (element) {
      feed.appendChild(element);
    }
    if (streaming) {
      // Still being written: it stays the last thing in the feed.
      feed.appendChild(streaming.element);
    }
    return element;
  }

  feed.querySelectorAll("[data-tool-call-id]").forEach((element) => tools.set(element.dataset.toolCallId, element));
  feed.querySelectorAll("[data-checkpoint-id]").forEach((element) => cards.set(element.dataset.checkpointId, element));
  document.querySelectorAll("time[datetime]").forEach(localizeTime);
  feed.querySelectorAll('.item.message [data-slot="text"]').forEach((text) => renderMarkdown(text, text.textContent));
  refreshCards();
  return Object.assign(view, { render, setStatus, setConn, refreshCards, markDecided, setMetrics, streamText });
}
