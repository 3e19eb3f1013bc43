// The chat page's live layer. The server has rendered the whole history; this script keeps it current.
// It joins the execution's room over Socket.IO, asks for every event after the last one on the page, and
// renders what arrives strictly in seq order, each seq once: live events that overtake the replay wait in
// `pending` until the gap before them fills, and a gap that stays open is asked for again. How one event
// becomes an item is chat-view.js's business.
import { createView, slot } from "./chat-view.js";
import { pageSocket, whenConnected } from "./page-socket.js";

(function () {
  const root = document.getElementById("chat");
  if (!root) {
    return;
  }
  const pill = document.getElementById("new-pill");
  const executionId = root.dataset.executionId;
  const token = root.dataset.token || null;
  // From the review mail's chat link: lets its reviewer decide here without signing in.
  const reviewerToken = root.dataset.reviewerToken || null;
  const csrf = root.dataset.csrf || "";
  let lastSeq = Number(root.dataset.lastSeq || "0");
  const pending = new Map();
  let socket = null;
  let joining = false;
  let denied = false;
  let waitingDecision = null; // {form, decision}: asked for before the page had joined (`requestDecision`)
  let joinAgain = false;
  let gapTimer = null;
  let unseen = 0;
  const GAP_WAIT_MS = 1500;
  // The safety net for a live event lost on the way (the database has it): a cheap re-join now and then.
  const RESYNC_MS = 30000;
  // The view asks for a fresh state (the metrics at the end, who may decide after a reviewer change).
  const view = createView(root, () => join());

  // ---- scrolling ------------------------------------------------------------------------------------

  function atBottom() {
    return window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 80;
  }

  function toBottom(smooth) {
    window.scrollTo({ top: document.documentElement.scrollHeight, behavior: smooth ? "smooth" : "auto" });
  }

  function hidePill() {
    unseen = 0;
    pill.hidden = true;
  }

  function afterAdding(count, stick) {
    document.getElementById("feed-empty").hidden = true;
    if (stick) {
      toBottom(false);
      return;
    }
    // The reader has scrolled up to read: leave them there and say that more came.
    unseen += count;
    pill.textContent = unseen === 1 ? "1 new message ↓" : `${unseen} new messages ↓`;
    pill.hidden = false;
  }

  // ---- ordering: each seq once, in order ------------------------------------------------------------

  function ingest(messages) {
    const stick = atBottom();
    let added = 0;
    for (const message of messages) {
      if (!message || message.executionId !== executionId || typeof message.seq !== "number") {
        continue;
      }
      if (message.seq > lastSeq && !pending.has(message.seq)) {
        pending.set(message.seq, message);
      }
    }
    while (pending.has(lastSeq + 1)) {
      const message = pending.get(lastSeq + 1);
      pending.delete(lastSeq + 1);
      lastSeq += 1;
      try {
        if (view.render(message)) {
          added += 1;
        }
      } catch (error) {
        console.error("could not show event", message, error);
      }
    }
    root.dataset.lastSeq = String(lastSeq);
    if (pending.size && !gapTimer) {
      // A later event came first; the one before it is usually a moment behind. If not, ask for it.
      gapTimer = setTimeout(() => {
        gapTimer = null;
        if (pending.size) {
          join();
        }
      }, GAP_WAIT_MS);
    }
    if (added) {
      afterAdding(added, stick);
    }
  }

  function applyState(state) {
    // A state read before events this page already shows would take the status line back in time.
    if (!state || state.lastSeq < lastSeq) {
      return;
    }
    view.reviewer = state.assignedReviewer || "";
    view.setStatus(state.status, state.text);
    if (state.final) {
      view.setMetrics(state.metrics);
    }
  }

  // ---- the socket -----------------------------------------------------------------------------------

  function join() {
    if (!socket || !socket.connected || denied) {
      return;
    }
    if (joining) {
      joinAgain = true;
      return;
    }
    joining = true;
    socket.timeout(15000).emit("join_execution", { executionId, token, reviewerToken, afterSeq: lastSeq }, (error, answer) => {
      joining = false;
      if (error) {
        setTimeout(join, 2000);
        return;
      }
      if (!answer || !answer.ok) {
        view.setConn("denied", (answer && answer.message) || "Not allowed");
        // Not disconnected: on a signed-in page the connection is the navigation's too (page-socket.js).
        denied = true;
        return;
      }
      view.canDecide = Boolean(answer.canDecide);
      ingest(answer.events || []);
      applyState(answer.state);
      view.refreshCards();
      root.dataset.joined = "true";
      sendWaitingDecision();
      if (answer.more || joinAgain) {
        joinAgain = false;
        join();
      }
    });
  }

  function showError(form, message) {
    const error = slot(form, "error");
    error.textContent = message.charAt(0).toUpperCase() + message.slice(1);
    error.hidden = false;
  }

  // The arguments the reviewer changed in the edit form (only those: the others stay as proposed).
  function editedArgs(form) {
    const edited = {};
    form.querySelectorAll("textarea[data-arg]").forEach((area) => {
      if (area.value !== area.defaultValue) {
        edited[area.dataset.arg] = area.value;
      }
    });
    return Object.keys(edited).length ? edited : null;
  }

  // An answer given before the page was connected (the buttons are there as soon as the page is): sent once the
  // page has joined, if its card still asks for it, never dropped without a word.
  function requestDecision(form, decision) {
    if (socket && socket.connected && root.dataset.joined === "true") {
      decide(form, decision);
      return;
    }
    waitingDecision = { form, decision };
    view.setConn("connecting", "Connecting… your answer goes as soon as the page is connected");
  }

  function sendWaitingDecision() {
    const waiting = waitingDecision;
    waitingDecision = null;
    if (waiting && waiting.form.isConnected && !waiting.form.hidden) {
      decide(waiting.form, waiting.decision);
    }
  }

  function decide(form, decision) {
    const card = form.closest("[data-checkpoint-id]");
    const error = slot(form, "error");
    const buttons = form.querySelectorAll("button");
    error.hidden = true;
    form.querySelectorAll("[data-arg-error]").forEach((span) => {
      span.hidden = true;
    });
    const comment = form.elements.comment.value;
    const edits = decision === "approve" ? editedArgs(form) : null;
    // The same rule as every channel's (review.decide checks it again): the agent revises from the comment.
    const grading = card.dataset.origin === "grade";
    if (decision === "reject" && !comment.trim() && !grading) {
      showError(form, "Say what should change: a rejection needs a comment.");
      form.elements.comment.focus();
      return;
    }
    buttons.forEach((button) => {
      button.disabled = true;
    });
    const request = { executionId, token, reviewerToken, checkpointId: card.dataset.checkpointId, decision, comment, csrf };
    if (edits) {
      request.editedArgs = edits;
    }
    // An optional grade of what the reviewer saw: review.decide checks it.
    if (form.elements.rating && form.elements.rating.value) {
      request.rating = Number(form.elements.rating.value);
    }
    if (form.elements.labels && form.elements.labels.value.trim()) {
      request.labels = form.elements.labels.value.split(",").map((label) => label.trim()).filter(Boolean);
    }
    socket.timeout(15000).emit("decide_checkpoint", request, (failure, answer) => {
      buttons.forEach((button) => {
        button.disabled = false;
      });
      if (!failure && answer && answer.ok) {
        view.markDecided(card, answer.decision);
        return;
      }
      const message = failure ? "No answer from the server; check the connection and try again." : answer.message;
      showError(form, message);
      const argument = answer && answer.argument;
      if (argument) {
        // An edited argument the tool would refuse: said beside its field too.
        const beside = Array.from(form.querySelectorAll("[data-arg-error]")).find((s) => s.dataset.argError === argument);
        if (beside) {
          beside.textContent = message;
          beside.hidden = false;
          beside.closest("details").open = true;
        }
      }
      if (answer && answer.error === "already_decided") {
        buttons.forEach((button) => {
          button.disabled = true;
        });
      }
    });
  }

  function connect() {
    if (typeof window.io !== "function") {
      view.setConn("offline", "Live updates unavailable: reload for news");
      return;
    }
    view.setConn("connecting", "Connecting…");
    const auth = token ? { executionId, token } : { executionId };
    socket = pageSocket(auth);
    whenConnected(() => {
      if (!denied) {
        view.setConn("live", "Live");
        join();
      }
    });
    socket.on("connect_error", (error) => {
      if (error && error.message === "unauthorized") {
        view.setConn("denied", "Not allowed: sign in or use the full chat link");
      } else {
        view.setConn("offline", "Reconnecting…");
      }
    });
    socket.on("disconnect", () => {
      if (denied) {
        return;
      }
      view.setConn("offline", "Reconnecting…");
    });
    socket.on("event", (message) => ingest([message]));
    socket.on("delta", (delta) => {
      if (delta && delta.executionId === executionId) {
        const stick = atBottom();
        if (view.streamText(delta) && stick) {
          toBottom(false);
        }
      }
    });
    setInterval(() => {
      if (!view.final && !joining) {
        join();
      }
    }, RESYNC_MS);
  }

  // ---- start ----------------------------------------------------------------------------------------

  document.getElementById("feed").addEventListener("submit", (event) => {
    const form = event.target.closest("form.cp-form");
    if (!form) {
      return;
    }
    event.preventDefault();
    const decision = event.submitter ? event.submitter.value : null;
    if (decision === "approve" || decision === "reject") {
      requestDecision(form, decision);
    }
  });
  // Keys on a focused card that waits for this reader: a approves, r opens the comment to say why it is rejected
  // (then Ctrl+Enter or the Reject button sends it). Never while typing in a field.
  document.getElementById("feed").addEventListener("keydown", (event) => {
    const article = event.target.closest(".checkpoint");
    if (!article || event.ctrlKey || event.metaKey || event.altKey) {
      if (article && event.key === "Enter" && (event.ctrlKey || event.metaKey) && event.target.name === "comment") {
        const form = event.target.form;
        if (form.dataset.intent === "reject") {
          event.preventDefault();
          requestDecision(form, "reject");
        }
      }
      return;
    }
    if (event.target !== article) {
      return;
    }
    const form = article.querySelector("form.cp-form");
    if (!form || form.hidden) {
      return;
    }
    if (event.key === "a") {
      event.preventDefault();
      requestDecision(form, "approve");
    } else if (event.key === "r") {
      event.preventDefault();
      form.dataset.intent = "reject";
      form.elements.comment.focus();
    }
  });
  pill.addEventListener("click", () => {
    toBottom(true);
    hidePill();
  });
  window.addEventListener(
    "scroll",
    () => {
      if (atBottom()) {
        hidePill();
      }
    },
    { passive: true },
  );
  if (!view.final) {
    toBottom(false);
  }
  connect();
})();
