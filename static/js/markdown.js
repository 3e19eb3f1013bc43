// The agent's text as Markdown: marked (GFM: code blocks, lists, links, tables) makes HTML of it, and DOMPurify
// keeps only what is safe of that HTML before it reaches the page. Two locks, either enough on its own for what
// the issue names: raw HTML in the text is shown as text (never parsed), and DOMPurify drops scripts, event
// handlers and any link whose scheme is not an ordinary one (javascript:, data:, vbscript:).
import { Marked } from "/vendor/marked.esm.js";
import DOMPurify from "/vendor/purify.es.mjs";

function escapeHtml(text) {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

const parser = new Marked({ gfm: true, breaks: true, async: false });
parser.use({
  renderer: {
    // Raw HTML (a block or an inline tag) is the agent's text, shown as written.
    html({ text }) {
      return escapeHtml(text);
    },
    // Images would load from wherever the text points (a tracking pixel): shown as their alt text and address.
    image({ href, text }) {
      return escapeHtml(text ? `${text} (${href})` : href);
    },
  },
});

const PURIFY = {
  ALLOWED_TAGS: [
    "a", "p", "br", "hr", "strong", "em", "del", "code", "pre", "blockquote", "ul", "ol", "li", "input",
    "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td",
  ],
  // `input` only as GFM's task-list checkboxes; `align` for table columns.
  ALLOWED_ATTR: ["href", "title", "start", "type", "checked", "disabled", "align"],
  ALLOW_DATA_ATTR: false,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    // Links leave the chat in a new tab, telling the other site nothing (the address carries a token).
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
  if (node.tagName === "INPUT" && node.getAttribute("type") !== "checkbox") {
    node.remove();
  }
});

/** Markdown text as a sanitised fragment; nothing in it runs. */
export function markdownFragment(text) {
  const html = parser.parse(String(text ?? ""));
  return DOMPurify.sanitize(html, { ...PURIFY, RETURN_DOM_FRAGMENT: true });
}

/** Replace an element's content with `text` rendered as Markdown; the text itself stays on `data-source`. */
export function renderMarkdown(element, text) {
  element.dataset.source = String(text ?? "");
  element.replaceChildren(markdownFragment(element.dataset.source));
}
