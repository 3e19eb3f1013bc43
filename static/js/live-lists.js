// The signed-in pages' live parts: the count of reviews waiting for you in the navigation, and the list on the
// page (the review inbox, the executions list: the element marked data-live-list), kept current. The server only
// says that something of yours changed (`lists`, chat/lists.py); this page then fetches itself again with its
// own session and swaps the list in, so it shows exactly what a reload would.
import { pageSocket, whenConnected } from "./page-socket.js";

(function () {
  if (typeof window.io !== "function") {
    return;
  }
  const badge = document.getElementById("nav-count");
  const list = document.querySelector("[data-live-list]");
  const socket = pageSocket();
  let fetching = null;
  let again = false;

  function watch() {
    socket.timeout(15000).emit("watch_lists", {}, (error, answer) => {
      if (error || !answer || !answer.ok) {
        return;
      }
      if (badge) {
        badge.textContent = String(answer.waiting);
        badge.hidden = answer.waiting === 0;
        badge.setAttribute("aria-label", `${answer.waiting} waiting for your review`);
      }
      document.documentElement.dataset.listsWatched = "true";
    });
  }

  async function refresh() {
    if (!list) {
      return;
    }
    if (fetching) {
      again = true; // one more fetch once this one is in: never a stale list last
      return;
    }
    fetching = fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } });
    try {
      const response = await fetching;
      if (response.ok) {
        const page = new DOMParser().parseFromString(await response.text(), "text/html");
        const fresh = page.querySelector("[data-live-list]");
        // Not while someone is typing or choosing inside it: the next change brings it anyway.
        const typing = document.activeElement && list.contains(document.activeElement) && document.activeElement.matches("input, select, textarea");
        if (fresh && !typing) {
          list.replaceChildren(...Array.from(fresh.childNodes).map((node) => document.importNode(node, true)));
          list.dataset.refreshed = String(Number(list.dataset.refreshed || "0") + 1);
        }
      }
    } catch (error) {
      console.warn("could not refresh the list", error);
    } finally {
      fetching = null;
      if (again) {
        again = false;
        refresh();
      }
    }
  }

  whenConnected(watch);
  socket.on("lists", () => {
    watch();
    refresh();
  });
})();
