// Berth web UI: one ES module, no build step; markdown-it, DOMPurify and highlight.js are vendored under
// /static/vendor/ (README there: versions and sources), nothing is loaded from elsewhere.
//
// Sections: markdown (safe rendering) · SSE parsing · API client · turn views · streaming with resume ·
// conversations · bundles and widgets · sign-in and workspace · start-up.
// The HTTP API it talks to is documented in docs/web-ui.md and at /openapi.json.

import MarkdownIt from "./vendor/markdown-it.min.js";
import DOMPurify from "./vendor/purify.es.js";
import hljs from "./vendor/highlight.min.js";

const STORAGE = {
  key: "berth.apiKey",
  tenant: "berth.tenant",
  project: "berth.project",
  bundle: (tenant, project) => `berth.bundle.${tenant}/${project}`,
};
const PAGE_SIZE = 20;
const RECONNECT = { firstDelayMs: 300, maxDelayMs: 8000, maxAttempts: 8 };
const STEP_MARKERS = { done: "✓", failed: "✗", in_progress: "…", pending: "□" };
const STEP_LABELS = { done: "done", failed: "failed", in_progress: "in progress", pending: "pending" };

// Inline SVG icons (constant strings; no icon font or emoji font needed).
const ICONS = {
  tool: '<svg viewBox="0 0 24 24" width="14" height="14" aria-hidden="true" focusable="false"><path fill="currentColor" d="M22.7 19.3 13.6 10.2c.9-2.3.4-5-1.5-6.9-2-2-5-2.4-7.4-1.3l4.3 4.3-3 3-4.4-4.3C.4 7.4.9 10.4 2.9 12.4c1.9 1.9 4.6 2.4 6.9 1.5l9.1 9.1c.4.4 1 .4 1.4 0l2.3-2.3c.5-.4.5-1.1.1-1.4z"/></svg>',
  file: '<svg viewBox="0 0 24 24" width="14" height="14" aria-hidden="true" focusable="false"><path fill="currentColor" d="M14 2H6a2 2 0 0 0-2 2v16a2 2 0 0 0 2 2h12a2 2 0 0 0 2-2V8l-6-6zm0 2.5L17.5 8H14V4.5z"/></svg>',
  thumbUp: '<svg viewBox="0 0 24 24" width="16" height="16" aria-hidden="true" focusable="false"><path fill="currentColor" d="M2 21h4V9H2v12zm20-11a2 2 0 0 0-2-2h-6.3l1-4.6v-.3c0-.4-.2-.8-.4-1.1L13.2 1 6.6 7.6C6.2 8 6 8.5 6 9v10a2 2 0 0 0 2 2h9c.8 0 1.5-.5 1.8-1.2l3-7.1c.1-.2.2-.5.2-.7v-2z"/></svg>',
  pencil: '<svg viewBox="0 0 24 24" width="14" height="14" aria-hidden="true" focusable="false"><path fill="currentColor" d="M3 17.25V21h3.75L17.8 9.94l-3.75-3.75L3 17.25zm17.7-10.2a1 1 0 0 0 0-1.42l-2.33-2.33a1 1 0 0 0-1.42 0l-1.83 1.83 3.75 3.75 1.83-1.83z"/></svg>',
  trash: '<svg viewBox="0 0 24 24" width="14" height="14" aria-hidden="true" focusable="false"><path fill="currentColor" d="M6 19a2 2 0 0 0 2 2h8a2 2 0 0 0 2-2V7H6v12zM19 4h-3.5l-1-1h-5l-1 1H5v2h14V4z"/></svg>',
  thumbDown: '<svg viewBox="0 0 24 24" width="16" height="16" aria-hidden="true" focusable="false"><path fill="currentColor" d="M22 3h-4v12h4V3zM2 14a2 2 0 0 0 2 2h6.3l-1 4.6v.3c0 .4.2.8.4 1.1l1.1 1 6.6-6.6c.4-.4.6-.9.6-1.4V5a2 2 0 0 0-2-2H7c-.8 0-1.5.5-1.8 1.2l-3 7.1c-.1.2-.2.5-.2.7v2z"/></svg>',
};

function icon(name) {
  const holder = document.createElement("span");
  holder.className = "icon";
  holder.innerHTML = ICONS[name];
  return holder;
}

// ---------------------------------------------------------------------------------------------------
// Markdown: markdown-it (raw HTML off) renders, DOMPurify sanitizes, highlight.js colours code blocks; all three
// are vendored under /static/vendor/ (see its README). Links only for http(s); images only of this conversation
// (fetched with the key) or data: images: an image at any other URL is never fetched, it becomes a link.

const HTML_ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Escape text for use in HTML content and quoted attribute values. */
export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]);
}

const SAFE_URL = /^https?:\/\/[^\s<>"'`]+$/i;
// An image of this conversation (an attachment, a produced file): shown, fetched with the key through the files
// route. Images at other URLs are never fetched (no tracking pixels in answers).
const CONVERSATION_IMAGE = /^fi:turn_[\w-]+\.(?:attachments|outputs|files)\/[^()\s"'<>`]+$/;
const DATA_IMAGE = /^data:image\/(?:png|gif|jpeg|webp);base64,[a-z0-9+/=]+$/i;
const ALIGNMENT = /text-align:\s*(left|right|center)/;

const markdown = new MarkdownIt({
  html: false, // the model's raw HTML stays text
  linkify: true,
  breaks: true,
  highlight: (code, language) => {
    if (!language || !hljs.getLanguage(language)) return ""; // markdown-it escapes it
    try {
      return hljs.highlight(code, { language, ignoreIllegals: true }).value;
    } catch {
      return "";
    }
  },
});
markdown.validateLink = (url) => SAFE_URL.test(url) || CONVERSATION_IMAGE.test(url) || DATA_IMAGE.test(url);
// Column alignment as a class: the page's policy forbids style attributes.
for (const rule of ["th_open", "td_open"]) {
  markdown.renderer.rules[rule] = (tokens, index, options, env, self) => {
    const token = tokens[index];
    const aligned = ALIGNMENT.exec(token.attrGet("style") || "");
    token.attrs = (token.attrs || []).filter(([name]) => name !== "style");
    if (aligned) token.attrJoin("class", `align-${aligned[1]}`);
    return self.renderToken(tokens, index, options);
  };
}
markdown.renderer.rules.table_open = () => '<div class="table-wrap"><table>\n';
markdown.renderer.rules.table_close = () => "</table></div>\n";

const PURIFY = {
  // DOMPurify's own rule without its other schemes (mailto:, tel:, …): values without a scheme (start="3") pass;
  // the links and images it keeps are checked again by finishFragment
  ALLOWED_URI_REGEXP: /^(?:(?:https?|fi):|[^a-z]|[a-z+.-]+(?:[^a-z+.\-:]|$))/i,
  FORBID_ATTR: ["style"],
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select"],
  RETURN_DOM_FRAGMENT: true,
};

/** Make what DOMPurify kept safe to show: links open elsewhere without a referrer; images of the conversation
 * are marked for fetching with the key, data: images stay, any other image becomes a link that nothing fetches.
 * The fragment is still in DOMPurify's inert document here, where no image loads. */
function finishFragment(fragment, citeUrls) {
  for (const link of fragment.querySelectorAll("a")) {
    const href = link.getAttribute("href") || "";
    if (!SAFE_URL.test(href)) {
      link.replaceWith(...link.childNodes);
      continue;
    }
    link.setAttribute("target", "_blank");
    link.setAttribute("rel", "noopener noreferrer");
    if (citeUrls.has(href)) link.classList.add("cite");
  }
  for (const image of fragment.querySelectorAll("img")) {
    const src = image.getAttribute("src") || "";
    const alt = image.getAttribute("alt") || "";
    if (CONVERSATION_IMAGE.test(src)) {
      image.removeAttribute("src");
      image.setAttribute("data-path", src);
      image.className = "answer-image";
    } else if (DATA_IMAGE.test(src)) {
      image.className = "answer-image";
    } else {
      const owner = image.ownerDocument;
      const replacement = SAFE_URL.test(src) ? owner.createElement("a") : owner.createElement("span");
      if (SAFE_URL.test(src)) {
        replacement.setAttribute("href", src);
        replacement.setAttribute("target", "_blank");
        replacement.setAttribute("rel", "noopener noreferrer");
      }
      replacement.className = "external-image";
      const where = SAFE_URL.test(src) ? new URL(src).host : "elsewhere";
      replacement.textContent = `${alt || "image"} (image at ${where}, not loaded)`;
      image.replaceWith(replacement);
    }
  }
  for (const code of fragment.querySelectorAll("pre > code")) code.classList.add("hljs");
  return fragment;
}

/** Markdown of raw text (tables, strikethrough, lists, quotes, fenced code with highlighting, links) as sanitized
 * HTML. ``context.citeUrls``: the URLs of cited sources, whose links are shown as citations. */
export function renderMarkdown(text, context = {}) {
  const citeUrls = new Set([...(context.citeUrls || [])].map((url) => markdown.normalizeLink(url)));
  const fragment = finishFragment(DOMPurify.sanitize(markdown.render(String(text)), PURIFY), citeUrls);
  const holder = fragment.ownerDocument.createElement("div");
  holder.append(fragment);
  return holder.innerHTML.trim();
}

// The server's grammar (streaming/citations.py): any case, spaces and tabs inside, ranges either way round.
const CITATION_TOKEN = /([ \t]*)\[\[[ \t]*S[ \t]*:([\d,\s-]+)\]\]/gi;
const MAX_SIDS_PER_TOKEN = 64;

/** Replace stored ``[[S:1]]``, ``[[S:1,3]]``, ``[[S:2-4]]`` tokens with markdown links to known sources;
 * a token with no known source is dropped with the spaces before it, never shown raw. */
export function renderCitationTokens(text, sourcesBySid) {
  return String(text).replace(CITATION_TOKEN, (_, spaces, spec) => {
    const sids = new Set();
    for (const part of spec.split(",")) {
      const [from, to] = part.split("-").map((n) => parseInt(n, 10));
      if (Number.isNaN(from)) continue;
      const [low, high] = Number.isNaN(to) || to === undefined ? [from, from] : [Math.min(from, to), Math.max(from, to)];
      for (let sid = low; sid <= high && sids.size < MAX_SIDS_PER_TOKEN; sid += 1) sids.add(sid);
    }
    const links = [...sids]
      .map((sid) => sourcesBySid.get(sid))
      .filter((source) => source && SAFE_URL.test(source.url))
      .map((source) => `[${String(source.title || source.url).replace(/[[\]]/g, "")}](${source.url})`)
      .join(" ");
    return links ? `${spaces}${links}` : "";
  });
}

/** Put ``text`` on the clipboard (the Clipboard API; a hidden text area where it is missing). */
async function copyText(text) {
  if (navigator.clipboard?.writeText) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = el("textarea", { class: "visually-hidden", readonly: true });
  area.value = text;
  document.body.append(area);
  area.select();
  const copied = document.execCommand("copy");
  area.remove();
  if (!copied) throw new Error("the browser refused to copy");
}

/** A button that copies what ``text()`` returns and says so for a moment. */
function copyButton(label, text, extraClass = "") {
  const button = el("button", { type: "button", class: `copy-button ${extraClass}`.trim(), title: label, "aria-label": label, text: "Copy" });
  button.addEventListener("click", async () => {
    try {
      await copyText(text());
      button.textContent = "Copied";
      button.dataset.copied = "true";
    } catch (error) {
      toast(`Nothing was copied: ${error.message}`);
      return;
    }
    setTimeout(() => {
      button.textContent = "Copy";
      delete button.dataset.copied;
    }, 1500);
  });
  return button;
}

/** Give every code block of rendered markdown a header: its language and a copy button. */
function decorateCodeBlocks(container) {
  for (const pre of container.querySelectorAll("pre")) {
    if (pre.parentElement?.classList.contains("code-wrap")) continue;
    const code = pre.querySelector("code");
    const language = [...(code?.classList || [])].find((name) => name.startsWith("language-"))?.slice(9) || "";
    const wrap = el("div", { class: "code-wrap" });
    pre.replaceWith(wrap);
    const header = el("div", { class: "code-header" }, el("span", { class: "code-language", text: language || "text" }));
    header.append(copyButton("Copy the code", () => (code || pre).textContent, "copy-code"));
    wrap.append(header, pre);
  }
}
// ---------------------------------------------------------------------------------------------------
// Server-sent events over fetch(): a line parser that is safe across chunk boundaries.

/** Parses an SSE byte stream (as text chunks) into ``{id, event, data}`` messages. */
export class SseParser {
  constructor(onMessage) {
    this.onMessage = onMessage;
    this.buffer = "";
    this.reset();
  }

  reset() {
    this.event = "";
    this.data = [];
    this.id = null;
  }

  push(chunk) {
    this.buffer += chunk;
    const lineEnd = /\r\n|\r|\n/g;
    let start = 0;
    let match;
    while ((match = lineEnd.exec(this.buffer)) !== null) {
      if (match[0] === "\r" && match.index === this.buffer.length - 1) break; // maybe half of \r\n
      this.line(this.buffer.slice(start, match.index));
      start = lineEnd.lastIndex;
    }
    this.buffer = this.buffer.slice(start);
  }

  line(text) {
    if (text === "") {
      if (this.data.length) this.onMessage({ id: this.id, event: this.event || "message", data: this.data.join("\n") });
      this.reset();
      return;
    }
    if (text.startsWith(":")) return; // comment (heartbeat)
    const colon = text.indexOf(":");
    const field = colon === -1 ? text : text.slice(0, colon);
    let value = colon === -1 ? "" : text.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id" && !value.includes("\u0000")) this.id = value;
  }
}

function eventSequence(id) {
  const seq = Number(String(id || "").split(":").pop());
  return Number.isFinite(seq) ? seq : 0;
}

// ---------------------------------------------------------------------------------------------------
// API client

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

const state = {
  key: localStorage.getItem(STORAGE.key),
  tenant: localStorage.getItem(STORAGE.tenant) || "default",
  project: localStorage.getItem(STORAGE.project) || "default",
  bundles: [],
  bundle: null,
  conversationId: null,
  conversations: new Map(),
  renaming: null,
  nextBefore: null,
  running: null,
  files: [],
  loadToken: 0,
  admin: false,
};

const $ = (id) => document.getElementById(id);

function authHeaders(key = state.key) {
  return key ? { Authorization: `Bearer ${key}` } : {};
}

function scopePath(tenant = state.tenant, project = state.project) {
  return `/v1/${encodeURIComponent(tenant)}/${encodeURIComponent(project)}`;
}

async function api(path, { method = "GET", json, form, key, signal } = {}) {
  const headers = { Accept: "application/json", ...authHeaders(key === undefined ? state.key : key) };
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (form !== undefined) {
    body = form; // the browser sets the multipart boundary
  }
  let response;
  try {
    response = await fetch(path, { method, headers, body, signal, cache: "no-store" });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, "network_error", "The server cannot be reached. Check your connection and try again.");
  }
  if (!response.ok) {
    let detail = null;
    try {
      detail = (await response.json()).error;
    } catch {
      detail = null;
    }
    const error = new ApiError(response.status, detail?.code || `http_${response.status}`, detail?.message || response.statusText);
    if (response.status === 401 && key === undefined) showLogin("Your API key was not accepted; sign in again.");
    throw error;
  }
  return response.status === 204 ? null : response.json();
}

// ---------------------------------------------------------------------------------------------------
// Small DOM helpers

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

let toastTimer = null;
function toast(message) {
  const box = $("toast");
  box.textContent = message;
  box.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => {
    box.hidden = true;
  }, 6000);
}

function relativeTime(iso) {
  const then = new Date(iso);
  const seconds = (then.getTime() - Date.now()) / 1000;
  const format = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  const steps = [
    [3600, "minute", 60],
    [86400, "hour", 3600],
    [604800, "day", 86400],
  ];
  const magnitude = Math.abs(seconds);
  if (magnitude < 45) return "just now";
  for (const [limit, unit, size] of steps) {
    if (magnitude < limit) return format.format(Math.round(seconds / size), unit);
  }
  return then.toLocaleDateString();
}

function messagesNearBottom() {
  const box = $("messages");
  return box.scrollHeight - box.scrollTop - box.clientHeight < 120;
}

function scrollMessages(force = false) {
  const box = $("messages");
  if (force || messagesNearBottom()) box.scrollTop = box.scrollHeight;
}

function prettyJson(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

// ---------------------------------------------------------------------------------------------------
// A turn on screen: prompt, reasoning, tool cards, answer, sources, follow-ups, footer (copy, regenerate, feedback,
// usage). A stored turn is shown again the same way (TurnView.fromStored), from what GET …/conversations/{id} keeps.

const NUMBER = new Intl.NumberFormat("en-US");

/** "1,234 tokens · $0.0042" for a turn's usage (``cost_usd`` null: its model has no price); "" when it reported
 * none (a turn stopped before its model call ended never hears what that call used). */
export function usageLabel(usage) {
  if (!usage) return "";
  const tokens =
    (usage.input_tokens || 0) + (usage.output_tokens || 0) + (usage.cache_read_input_tokens || 0) + (usage.cache_creation_input_tokens || 0);
  if (!tokens) return "";
  const cost = typeof usage.cost_usd === "number" ? ` · $${usage.cost_usd < 0.01 ? usage.cost_usd.toFixed(4) : usage.cost_usd.toFixed(2)}` : "";
  return `${NUMBER.format(tokens)} tokens${cost}`;
}

function usageDetail(usage) {
  const parts = [
    `input ${NUMBER.format(usage.input_tokens || 0)}`,
    `output ${NUMBER.format(usage.output_tokens || 0)}`,
    `cache read ${NUMBER.format(usage.cache_read_input_tokens || 0)}`,
    `cache write ${NUMBER.format(usage.cache_creation_input_tokens || 0)}`,
  ];
  const cost = typeof usage.cost_usd === "number" ? `cost $${usage.cost_usd.toFixed(6)}` : "cost unknown (the model has no price)";
  return `${parts.join(" · ")} tokens; ${cost}`;
}

/** What an attachment's chip says when the model does not get the file as it is (the notice's code). */
const MODEL_VIEWS = {
  attachment_downscaled: "downscaled for the model",
  attachment_as_text: "read as text by the model",
  attachment_not_sent: "not seen by the model",
};

class TurnView {
  constructor({ prompt, attachments = [], conversationId }) {
    this.conversationId = conversationId;
    this.prompt = prompt || "";
    this.turnId = null;
    this.lastEventId = null;
    this.lastSeq = 0;
    this.answerText = "";
    this.answerOpen = null;
    this.thinking = null;
    this.sources = new Map();
    this.codeBlocks = new Map();
    this.renderPending = false;
    this.finished = false;
    this.abort = null;
    this.usage = null;
    this.feedback = null;

    const attachmentList = attachments.length
      ? el("ul", { class: "attachment-chips", "aria-label": "Attachments" }, ...attachments.map((a) => this.withModelView(this.attachmentChip(a), a)))
      : null;
    this.reasoningText = el("div", { class: "reasoning-text" });
    this.reasoning = el("details", { class: "reasoning", hidden: true }, el("summary", { text: "Reasoning" }), this.reasoningText);
    this.activity = el("div", { class: "activity" });
    this.answer = el("div", { class: "answer markdown", "data-deltas": "0" });
    this.status = el("p", { class: "turn-status muted small", role: "status" });
    this.stoppedMark = el("p", { class: "stopped-mark", hidden: true, text: "■ Stopped: the answer was cut off here." });
    this.sourceList = el("ol", { class: "sources", hidden: true, "aria-label": "Sources" });
    this.artifactList = el("div", { class: "artifacts", hidden: true, "aria-label": "Files the turn produced" });
    this.artifacts = [];
    this.notices = el("div", { class: "notices" });
    this.followups = el("div", { class: "followups", role: "group", "aria-label": "Suggested follow-ups", hidden: true });
    this.footer = el("div", { class: "turn-footer", hidden: true });
    this.assistant = el(
      "div",
      { class: "message assistant", "aria-busy": "true" },
      el("div", { class: "avatar", "aria-hidden": "true", text: "⚓" }),
      el(
        "div",
        { class: "assistant-body" },
        this.reasoning,
        this.activity,
        this.answer,
        this.stoppedMark,
        this.status,
        this.artifactList,
        this.sourceList,
        this.notices,
        this.followups,
        this.footer,
      ),
    );
    const edit = el("button", {
      type: "button",
      class: "icon-button edit-prompt",
      title: "Edit and send again",
      "aria-label": "Edit this message and send it again",
      text: "✎ Edit",
      onclick: () => editPrompt(this.prompt),
    });
    this.root = el(
      "article",
      { class: "turn", "data-state": "pending", "aria-label": "Turn" },
      el("div", { class: "message user" }, el("div", { class: "bubble", text: prompt || "" }), attachmentList),
      el("div", { class: "user-actions last-only" }, edit),
      this.assistant,
    );
  }

  attachmentChip(attachment) {
    const mime = attachment.mime || "";
    if (mime.startsWith("image/")) return this.attachmentThumbnail(attachment);
    const kind = fileKind(mime, attachment.name);
    const details = [kind, attachment.size ? formatBytes(attachment.size) : ""].filter(Boolean).join(", ");
    const label = `${attachment.name || "attachment"}${details ? ` (${details})` : ""}`;
    if (!attachment.path || !this.conversationId) return el("li", { class: "chip" }, icon("file"), label);
    const link = el("a", {
      href: "#",
      class: "chip-link",
      onclick: (event) => {
        event.preventDefault();
        openConversationFile(this.conversationId, attachment.path, attachment.name);
      },
    });
    link.append(icon("file"), label);
    return el("li", { class: "chip" }, link);
  }

  /** An image attachment as a thumbnail: from the picked file while sending, else fetched (with the API key). */
  attachmentThumbnail(attachment) {
    const name = attachment.name || "image";
    const image = el("img", { class: "thumbnail", alt: name, title: `${name} (${formatBytes(attachment.size || 0)})` });
    const item = el("li", { class: "thumb" }, image);
    const show = (blob) => {
      image.src = URL.createObjectURL(blob);
      image.addEventListener("load", () => URL.revokeObjectURL(image.src), { once: true });
    };
    if (attachment.file) {
      show(attachment.file);
    } else if (attachment.path && this.conversationId) {
      fetch(`${scopePath()}/conversations/${this.conversationId}/files/${encodeURI(attachment.path)}`, {
        headers: authHeaders(),
      })
        .then((response) => (response.ok ? response.blob() : Promise.reject(new Error(`${response.status}`))))
        .then(show)
        .catch(() => item.replaceChildren(icon("file"), `${name} (image)`));
      image.addEventListener("click", () => openConversationFile(this.conversationId, attachment.path, name));
    }
    return item;
  }

  setTurn(turnId) {
    this.turnId = turnId;
    this.root.dataset.turnId = turnId;
    this.root.dataset.state = "streaming";
  }

  setStatus(text) {
    this.status.textContent = text;
  }

  /** Apply one event; returns true when the turn has ended. Events at or before the last seen id are skipped. */
  apply(message) {
    const seq = eventSequence(message.id);
    if (message.id) {
      if (seq && seq <= this.lastSeq) return false;
      this.lastSeq = seq || this.lastSeq;
      this.lastEventId = message.id;
      this.root.dataset.lastEventId = message.id;
    }
    let data = {};
    try {
      data = message.data ? JSON.parse(message.data) : {};
    } catch {
      return false;
    }
    switch (message.event) {
      case "turn.started":
        this.setStatus("Thinking…");
        return false;
      case "channel.delta":
        this.delta(data);
        return false;
      case "channel.done":
        this.channelDone(data);
        return false;
      case "tool.call":
        this.toolCall(data);
        return false;
      case "tool.result":
        this.toolResult(data);
        return false;
      case "plan":
        renderPlan(data.plan);
        return false;
      case "notice":
        if (data.code === "stream_cancelled") this.dropPartialAnswer();
        if (MODEL_VIEWS[data.code]) this.attachmentNotice(data);
        else this.notice(data.message || data.code || "notice", data.code);
        return false;
      case "compaction":
        this.notice(data.message || "Earlier turns were summarized to fit the context.", "compaction");
        return false;
      case "citation.sources":
        for (const source of data.sources || []) this.sources.set(source.sid, source);
        return false;
      case "artifact":
        this.artifacts.push(data);
        return false;
      case "user.followup":
      case "user.steer":
        this.liveEvent(data);
        return false;
      case "conversation.titled":
        retitleConversation(data.conversation_id, data.title);
        return false;
      case "turn.completed":
        this.nextTurn = data.next_turn || null;
        this.complete(data);
        return true;
      case "turn.failed":
        this.fail(data.code, data.message);
        return true;
      default:
        return false;
    }
  }

  delta({ channel, instance, marker, text }) {
    const kind = marker || channel;
    if (!text) return;
    if (kind === "thinking") {
      this.reasoning.hidden = false;
      if (!this.thinking) {
        this.thinking = el("p");
        this.reasoningText.append(this.thinking);
      }
      this.thinking.append(text);
      this.setStatus("Thinking…");
    } else if (kind === "answer") {
      const key = `${channel}:${instance}`;
      if (this.answerOpen !== key && this.answerText) this.answerText += "\n\n";
      this.answerOpen = key;
      this.answerText += text;
      this.answer.dataset.deltas = String(Number(this.answer.dataset.deltas) + 1);
      this.setStatus("Writing…");
      this.scheduleAnswerRender();
    } else {
      this.codeBlock(channel, instance, kind).append(text);
    }
  }

  channelDone({ channel, instance, marker }) {
    const kind = marker || channel;
    if (kind === "thinking") this.thinking = null;
    else if (kind === "answer") this.answerOpen = null;
    else this.codeBlocks.delete(`${channel}:${instance}`);
  }

  codeBlock(channel, instance, kind) {
    const key = `${channel}:${instance}`;
    let code = this.codeBlocks.get(key);
    if (!code) {
      code = this.codeFigure(kind === "code" ? "Code" : channel);
      this.codeBlocks.set(key, code);
    }
    return code;
  }

  /** A program the model wrote (the ``code`` channel), as a captioned block in the turn's activity. */
  codeFigure(label, text = "") {
    const code = el("code", { text });
    this.activity.append(el("figure", { class: "code-block" }, el("figcaption", { text: label }), el("pre", {}, code)));
    return code;
  }

  scheduleAnswerRender() {
    if (this.renderPending) return;
    this.renderPending = true;
    const render = () => {
      this.renderPending = false;
      this.renderAnswer();
    };
    // requestAnimationFrame is paused in hidden tabs; the timer keeps streaming visible when they come back.
    if (document.hidden) setTimeout(render, 50);
    else requestAnimationFrame(render);
  }

  renderAnswer() {
    const follow = messagesNearBottom();
    const citeUrls = new Set([...this.sources.values()].map((s) => s.url));
    this.answer.innerHTML = renderMarkdown(this.answerText, { citeUrls });
    decorateCodeBlocks(this.answer);
    this.showAnswerImages();
    if (follow) scrollMessages(true);
  }

  /** Load the conversation's images the answer shows (once each, though the answer renders again as it streams). */
  showAnswerImages() {
    this.answerImages = this.answerImages || new Map();
    for (const image of this.answer.querySelectorAll("img.answer-image[data-path]")) {
      const path = image.dataset.path;
      if (!this.conversationId || !path) continue;
      if (!this.answerImages.has(path)) this.answerImages.set(path, fetchConversationBlob(this.conversationId, path));
      this.answerImages
        .get(path)
        .then((blob) => {
          image.src = URL.createObjectURL(blob);
          image.dataset.loaded = "true";
        })
        .catch((error) => image.replaceWith(el("span", { class: "muted small", text: `(${path} cannot be shown: ${error.message})` })));
    }
  }

  toolCard(callId, toolId) {
    let card = this.activity.querySelector(`[data-call-id="${CSS.escape(callId)}"]`);
    if (!card) {
      const badge = el("span", { class: "badge running", text: "running…" });
      const params = el("pre", { class: "tool-params" });
      const result = el("pre", { class: "tool-result" });
      card = el(
        "details",
        { class: "tool-card running", "data-call-id": callId, "data-tool-id": toolId },
        el("summary", {}, icon("tool"), el("code", { class: "tool-id", text: toolId }), badge),
        el(
          "div",
          { class: "tool-body" },
          el("h4", { text: "Parameters" }),
          params,
          el("h4", { class: "result-title", text: "Result", hidden: true }),
          result,
        ),
      );
      result.hidden = true;
      this.activity.append(card);
    }
    return card;
  }

  toolCall({ call_id: callId, tool_id: toolId, params }) {
    const card = this.toolCard(callId, toolId);
    card.querySelector(".tool-params").textContent = prettyJson(params ?? {});
    this.setStatus(`Running ${toolId}…`);
    scrollMessages();
  }

  toolResult({ call_id: callId, tool_id: toolId, ok, summary, paths }) {
    const card = this.toolCard(callId, toolId);
    card.classList.remove("running");
    card.classList.add(ok ? "ok" : "failed");
    card.dataset.ok = ok ? "true" : "false";
    const badge = card.querySelector(".badge");
    badge.className = `badge ${ok ? "ok" : "failed"}`;
    badge.textContent = ok ? "ok" : "failed";
    const result = card.querySelector(".tool-result");
    result.textContent = summary || (ok ? "(no output)" : "(failed)");
    result.hidden = false;
    card.querySelector(".result-title").hidden = false;
    if (paths && paths.length) card.querySelector(".tool-body").append(el("p", { class: "muted small", text: paths.join(" · ") }));
    this.setStatus("Thinking…");
  }

  /** A tool call that never returned (the turn was stopped while it ran): its card says so. */
  toolUnfinished(callId) {
    const card = this.activity.querySelector(`[data-call-id="${CSS.escape(callId)}"]`);
    if (!card || !card.classList.contains("running")) return;
    card.classList.replace("running", "unfinished");
    card.dataset.ok = "none";
    const badge = card.querySelector(".badge");
    badge.className = "badge";
    badge.textContent = "not finished";
  }

  /** A follow-up or steer the user sent while this turn runs: shown where it arrived. */
  liveEvent({ kind, message }) {
    const label = kind === "steer" ? "Steer" : "Follow-up";
    this.activity.append(
      el("div", { class: `live-event ${kind}`, "data-kind": kind }, el("span", { class: "live-kind muted small", text: label }), el("span", { text: message })),
    );
    scrollMessages();
  }

  /** A steer stopped the answer being written: what it had written is dropped; the next answer replaces it. */
  dropPartialAnswer() {
    this.answerText = "";
    this.answerOpen = null;
    this.renderAnswer();
  }

  /** Name an attachment's chip, and mark it when the model does not get the file as it is (``sent``). */
  withModelView(item, attachment) {
    item.dataset.name = attachment.name || "";
    if (attachment.sent) this.markModelView(item, `attachment_${attachment.sent}`, attachment.sent_note || "");
    return item;
  }

  markModelView(item, code, note) {
    item.dataset.sent = code;
    item.title = note;
    item.append(el("span", { class: "model-view muted small", text: MODEL_VIEWS[code] }));
  }

  /** A file the model gets downscaled, as text, or not at all: said under the user's message, its chip marked. */
  attachmentNotice({ code, message, name }) {
    const chips = [...this.root.querySelectorAll(".message.user .attachment-chips > li")];
    const chip = chips.find((item) => item.dataset.name === name && !item.dataset.sent);
    if (chip) this.markModelView(chip, code, message);
    const line = el("p", { class: "notice attachment-notice", title: code, "data-code": code, text: `ℹ ${message}` });
    if (!chip) {
      this.activity.append(line); // a follow-up's file: beside the follow-up
      return;
    }
    const user = this.root.querySelector(".message.user");
    let notes = user.querySelector(".attachment-notices");
    if (!notes) user.append((notes = el("div", { class: "notices attachment-notices" })));
    notes.append(line);
  }

  notice(message, code) {
    this.notices.append(el("p", { class: "notice", title: code || "", text: `ℹ ${message}` }));
  }

  renderSources(sources) {
    this.sourceList.replaceChildren();
    for (const source of sources || []) {
      if (!SAFE_URL.test(source.url || "")) continue;
      this.sourceList.append(
        el("li", {}, el("a", { href: source.url, target: "_blank", rel: "noopener noreferrer", text: source.title || source.url })),
      );
    }
    this.sourceList.hidden = this.sourceList.children.length === 0;
  }

  complete({ answer, followups, sources_used: sourcesUsed, outcome, usage }) {
    for (const source of sourcesUsed || []) this.sources.set(source.sid, source);
    if (!this.answerText && answer) this.answerText = renderCitationTokens(answer, this.sources);
    this.renderAnswer();
    this.renderSources(sourcesUsed);
    this.renderFollowups(followups);
    this.renderArtifacts();
    this.finish(outcome === "cancelled" ? "cancelled" : "completed");
    if (outcome && outcome !== "completed") this.notice(`The turn ended: ${outcome}.`, outcome);
    this.usage = usage || null;
    this.renderFooter();
  }

  fail(code, message) {
    if (code === "cancelled") {
      this.stopped();
      return;
    }
    this.notices.append(el("p", { class: "error", role: "alert", text: `${message || "The turn failed."}${code ? ` (${code})` : ""}` }));
    this.finish("failed");
  }

  /** The user stopped the turn: what it had written stays, marked as cut off. */
  stopped() {
    for (const card of this.activity.querySelectorAll(".tool-card.running")) this.toolUnfinished(card.dataset.callId);
    this.stoppedMark.textContent = this.answerText.trim() ? "■ Stopped: the answer was cut off here." : "■ Stopped before it answered.";
    this.stoppedMark.hidden = false;
    if (this.answerText) this.renderAnswer();
    this.renderArtifacts();
    this.finish("cancelled");
    this.renderFooter();
  }

  finish(finalState) {
    this.finished = true;
    this.root.dataset.state = finalState;
    this.assistant.setAttribute("aria-busy", "false");
    this.setStatus("");
  }

  // Files the turn wrote under outputs/ (a chart from exec.python): served once the turn is committed, so shown
  // at its end. Images are fetched with the key and shown inline; other files are chips that download them.
  renderArtifacts() {
    this.artifactList.replaceChildren();
    for (const artifact of this.artifacts) {
      const name = artifact.path.split("/").pop();
      const chip = el("a", {
        href: "#",
        class: "chip chip-link",
        text: `${name} (${formatBytes(artifact.size || 0)})`,
        onclick: (event) => {
          event.preventDefault();
          openConversationFile(this.conversationId, artifact.path, name);
        },
      });
      if ((artifact.mime || "").startsWith("image/") && this.conversationId) {
        const image = el("img", { class: "artifact-image", alt: name, "data-path": artifact.path });
        this.artifactList.append(el("figure", { class: "artifact" }, image, el("figcaption", {}, chip)));
        loadConversationImage(this.conversationId, artifact.path, image);
      } else {
        this.artifactList.append(el("figure", { class: "artifact" }, chip));
      }
    }
    this.artifactList.hidden = this.artifacts.length === 0;
  }

  renderFollowups(followups) {
    this.followups.replaceChildren();
    for (const text of followups || []) {
      this.followups.append(el("button", { type: "button", class: "chip followup", text, onclick: () => sendMessage(text) }));
    }
    this.followups.hidden = this.followups.children.length === 0;
  }

  /** The footer of an ended turn: copy the answer, regenerate (the last turn), 👍/👎 (a turn that answered), usage. */
  renderFooter() {
    if (!this.turnId) return;
    const items = [];
    if (this.answerText.trim()) items.push(copyButton("Copy the answer", () => this.answerText, "copy-answer"));
    if (this.prompt) {
      items.push(
        el("button", {
          type: "button",
          class: "button secondary small regenerate last-only",
          title: "Send your message again for a new answer (this one stays above it)",
          text: "↻ Regenerate",
          onclick: () => !state.running && sendMessage(this.prompt),
        }),
      );
    }
    if (this.answerText.trim()) items.push(...this.feedbackButtons());
    const used = usageLabel(this.usage);
    if (used) items.push(el("span", { class: "usage muted small", title: usageDetail(this.usage), text: used }));
    this.footer.replaceChildren(...items);
    this.footer.hidden = items.length === 0;
  }

  feedbackButtons() {
    const thanks = el("span", { class: "muted small feedback-status", role: "status" });
    const button = (reaction, iconName, label) =>
      el(
        "button",
        {
          type: "button",
          class: "icon-button feedback",
          "data-reaction": reaction,
          "aria-label": label,
          title: label,
          "aria-pressed": this.feedback === reaction ? "true" : "false",
          onclick: async (event) => {
            const pressed = event.currentTarget.getAttribute("aria-pressed") === "true";
            const chosen = pressed ? "neutral" : reaction;
            try {
              await api(`${scopePath()}/conversations/${this.conversationId}/turns/${this.turnId}/feedback`, {
                method: "POST",
                json: { reaction: chosen },
              });
              this.feedback = chosen;
              for (const other of this.footer.querySelectorAll("button.feedback")) {
                other.setAttribute("aria-pressed", other.dataset.reaction === chosen ? "true" : "false");
              }
              thanks.textContent = chosen === "neutral" ? "Feedback cleared" : "Thanks for the feedback";
            } catch (error) {
              toast(`Feedback was not saved: ${error.message}`);
            }
          },
        },
        icon(iconName),
      );
    return [button("ok", "thumbUp", "Good answer"), button("not_ok", "thumbDown", "Bad answer"), thanks];
  }

  /** Fill the view from a stored turn of ``GET …/conversations/{id}``: everything it showed live. */
  static fromStored(turn, conversationId) {
    const view = new TurnView({ prompt: turn.prompt, attachments: turn.attachments || [], conversationId });
    view.setTurn(turn.turn_id);
    if (turn.state === "running" || turn.state === "accepted") return view; // its events stream again from the start
    for (const citation of turn.citations || []) view.sources.set(citation.sid, citation);
    for (const thought of turn.reasoning || []) {
      view.reasoning.hidden = false;
      view.reasoningText.append(el("p", { text: thought }));
    }
    const activity = [
      ...(turn.tools || []).map((tool) => ({ seq: tool.seq, show: () => view.storedTool(tool) })),
      ...(turn.live_events || []).map((event) => ({ seq: event.seq, show: () => view.liveEvent(event) })),
    ].sort((a, b) => a.seq - b.seq);
    for (const item of activity) item.show();
    for (const notice of turn.notices || []) view.notice(notice.message || notice.code, notice.code);
    view.artifacts = [...(turn.artifacts || [])];
    view.answerText = renderCitationTokens(turn.answer || "", view.sources);
    view.renderAnswer();
    view.renderSources(turn.citations);
    view.renderFollowups(turn.followups);
    view.usage = turn.usage || null;
    view.feedback = (turn.feedback || []).filter((f) => f.origin === "user").pop()?.reaction || null;
    view.renderArtifacts();
    if (turn.state === "cancelled") {
      view.stopped();
      return view;
    }
    view.finish(turn.state === "completed" ? "completed" : turn.state);
    if (turn.state !== "completed") {
      const text = turn.status_message || (turn.state === "interrupted" ? "The turn was interrupted." : "This turn failed.");
      view.notices.append(el("p", { class: "error", role: "alert", text: `${text} (${turn.state})` }));
    } else if (turn.outcome && turn.outcome !== "completed") {
      view.notice(`The turn ended: ${turn.outcome}.`, turn.outcome);
    }
    view.renderFooter();
    return view;
  }

  /** A stored tool call as its card (and its program, for exec.python) showed it. */
  storedTool(tool) {
    if (tool.code) this.codeFigure("Code", tool.code);
    this.toolCall({ call_id: tool.call_id, tool_id: tool.tool_id, params: tool.params });
    if (tool.ok === null || tool.ok === undefined) this.toolUnfinished(tool.call_id);
    else this.toolResult({ call_id: tool.call_id, tool_id: tool.tool_id, ok: tool.ok, summary: tool.summary, paths: [] });
  }
}

function formatBytes(size) {
  if (size < 1024) return `${size} B`;
  if (size < 1024 * 1024) return `${(size / 1024).toFixed(1)} KB`;
  return `${(size / 1024 / 1024).toFixed(1)} MB`;
}

/** A file of the conversation, fetched through the files route with the key. */
async function fetchConversationBlob(conversationId, path) {
  const response = await fetch(`${scopePath()}/conversations/${conversationId}/files/${encodeURI(path)}`, {
    headers: authHeaders(),
  });
  if (!response.ok) throw new Error(`${response.status}`);
  return response.blob();
}

async function loadConversationImage(conversationId, path, image) {
  try {
    const response = await fetch(`${scopePath()}/conversations/${conversationId}/files/${encodeURI(path)}`, {
      headers: authHeaders(),
    });
    if (!response.ok) throw new Error(`${response.status}`);
    image.src = URL.createObjectURL(await response.blob());
    image.dataset.loaded = "true";
  } catch (error) {
    image.replaceWith(el("span", { class: "muted small", text: `(the image cannot be shown: ${error.message})` }));
  }
}

/** A short name for a file's type, for its chip: "PDF", "Word", "Excel", "PowerPoint", "text", else the subtype. */
function fileKind(mime, name) {
  const kinds = {
    "application/pdf": "PDF",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "Word",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "Excel",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "PowerPoint",
  };
  if (kinds[mime]) return kinds[mime];
  if (mime.startsWith("text/")) return "text";
  if (mime) return mime.split("/").pop();
  const extension = (name || "").split(".").pop();
  return extension && extension !== name ? extension.toUpperCase() : "";
}

async function openConversationFile(conversationId, path, name) {
  try {
    const response = await fetch(`${scopePath()}/conversations/${conversationId}/files/${encodeURI(path)}`, {
      headers: authHeaders(),
    });
    if (!response.ok) throw new Error(`${response.status}`);
    const url = URL.createObjectURL(await response.blob());
    const link = el("a", { href: url, download: name || "" });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
  } catch (error) {
    toast(`The file cannot be opened (${error.message}).`);
  }
}

// ---------------------------------------------------------------------------------------------------
// Plan panel

function renderPlan(plan) {
  const panel = $("plan-panel");
  const list = $("plan-steps");
  if (!plan || !Array.isArray(plan.steps)) {
    panel.hidden = true;
    list.replaceChildren();
    return;
  }
  list.replaceChildren(
    ...plan.steps.map((step) =>
      el(
        "li",
        { class: `plan-step ${step.status || "pending"}` },
        el("span", { class: "marker", "aria-hidden": "true", text: STEP_MARKERS[step.status] || "□" }),
        el("span", { class: "label", text: step.label }),
        el("span", { class: "visually-hidden", text: ` (${STEP_LABELS[step.status] || "pending"})` }),
      ),
    ),
  );
  panel.dataset.planId = plan.plan_id || "";
  panel.dataset.status = plan.status || "open";
  panel.hidden = false;
}

// ---------------------------------------------------------------------------------------------------
// Streaming with resume: on a dropped connection, reconnect with Last-Event-ID and back off.

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });

/** Read what a stream sends after its turn ended (the conversation's title), without holding anyone up. */
function drainAfterEnd(reader, parser) {
  (async () => {
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        parser.push(value);
      }
    } catch {
      /* the stream was dropped: the title shows on the next listing */
    }
  })();
}

async function streamTurn(view, eventsUrl) {
  const controller = new AbortController();
  view.abort = controller;
  let failures = 0;
  while (!view.finished && !controller.signal.aborted) {
    let ended = false;
    let progressed = false;
    try {
      const headers = { Accept: "text/event-stream", ...authHeaders() };
      if (view.lastEventId) headers["Last-Event-ID"] = view.lastEventId;
      const response = await fetch(eventsUrl, { headers, signal: controller.signal, cache: "no-store" });
      if (response.status === 401 || response.status === 403 || response.status === 404) {
        view.fail(`http_${response.status}`, "The turn's events are no longer available.");
        return;
      }
      if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
      if (failures) view.setStatus("Reconnected.");
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      const parser = new SseParser((message) => {
        progressed = true;
        if (view.apply(message)) ended = true;
      });
      while (!ended) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.push(value);
      }
      if (ended) {
        drainAfterEnd(reader, parser); // the title comes after the turn's end, on the same stream
        return;
      }
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    if (view.finished) return;
    failures = progressed ? 1 : failures + 1;
    if (failures > RECONNECT.maxAttempts) {
      view.fail("connection_lost", "The connection to the server was lost.");
      return;
    }
    const delay = Math.min(RECONNECT.firstDelayMs * 2 ** (failures - 1), RECONNECT.maxDelayMs);
    view.setStatus("Connection lost; reconnecting…");
    view.root.dataset.reconnects = String(Number(view.root.dataset.reconnects || 0) + 1);
    await sleep(delay * (0.8 + Math.random() * 0.4), controller.signal);
  }
}

// ---------------------------------------------------------------------------------------------------
// Sending messages

function setRunning(view) {
  state.running = view;
  $("send-button").textContent = view ? "Add" : "Send";
  $("send-button").title = view ? "Add this to the running turn (a follow-up)" : "";
  $("steer-button").hidden = !view;
  $("stop-button").hidden = !view;
  document.body.dataset.running = view ? "true" : "false"; // hides regenerate and edit while a turn runs
  for (const chip of document.querySelectorAll("button.followup")) chip.disabled = Boolean(view);
}

/** Edit-and-resend: the message goes back into the composer; sending it starts a new turn. */
function editPrompt(text) {
  const input = $("composer-input");
  input.value = text;
  autoGrow(input);
  input.focus();
  input.setSelectionRange(text.length, text.length);
}

/** Show the first message as the conversation's title until the summarizer's arrives (the server does the same). */
function showProvisionalTitle(conversationId, message) {
  const meta = state.conversations.get(conversationId) || { id: conversationId, bundle: state.bundle };
  meta.title = message.slice(0, 80);
  meta.title_source = "message";
  meta.updated_at = new Date().toISOString();
  state.conversations.delete(conversationId);
  state.conversations = new Map([[conversationId, meta], ...state.conversations]);
  renderConversationList();
}

/** A refused first message leaves no conversation in the list (the empty one is used for the next try). */
function forgetProvisionalTitle(conversationId) {
  state.conversations.delete(conversationId);
  renderConversationList();
}

function timezone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  } catch {
    return "UTC";
  }
}

function appendTurn(view) {
  $("empty-state").hidden = true;
  $("messages").append(view.root);
  scrollMessages(true);
}

async function ensureConversation() {
  if (state.conversationId) return state.conversationId;
  const created = await api(`${scopePath()}/conversations`, { method: "POST", json: state.bundle ? { bundle: state.bundle } : {} });
  state.conversationId = created.id;
  state.conversations = new Map([[created.id, created], ...state.conversations]);
  renderConversationList();
  return created.id;
}

/** Send a follow-up or a steer to the turn that runs; when it has ended meanwhile, the event starts the next. */
async function sendLiveEvent(view, kind, message) {
  if (!view.turnId || !view.conversationId) {
    toast("The turn is starting; send it again in a moment.");
    return;
  }
  try {
    const accepted = await api(`${scopePath()}/conversations/${view.conversationId}/turns/${view.turnId}/events`, {
      method: "POST",
      json: { kind, message },
    });
    clearComposer();
    if (accepted.started_turn) view.nextTurn = { turn_id: accepted.turn_id, events_url: accepted.events_url, prompt: message };
  } catch (error) {
    toast(error.message);
  }
}

/** Follow a turn the server started from live events (they came after the answer was written). */
async function followNextTurn(view, conversationId) {
  let next = view.nextTurn;
  while (next && next.events_url) {
    const following = new TurnView({ prompt: next.prompt || next.message || "(follow-up)", conversationId });
    setRunning(following);
    appendTurn(following);
    following.setTurn(next.turn_id);
    try {
      await streamTurn(following, next.events_url);
    } finally {
      if (state.running === following) setRunning(null);
    }
    next = following.nextTurn;
  }
}

async function sendMessage(text, liveKind = "followup") {
  const message = (text || "").trim();
  if (!message) return;
  if (state.running) {
    await sendLiveEvent(state.running, liveKind, message);
    return;
  }
  const files = [...state.files];
  const view = new TurnView({
    prompt: message,
    attachments: files.map((f) => ({ name: f.name, size: f.size, mime: f.type, file: f })),
  });
  setRunning(view);
  appendTurn(view);
  view.setStatus("Sending…");
  let untitled = null; // a conversation this message would title: untitled again if the message is refused
  try {
    const conversationId = await ensureConversation();
    view.conversationId = conversationId;
    if (!state.conversations.get(conversationId)?.title) {
      untitled = conversationId;
      showProvisionalTitle(conversationId, message);
    }
    const url = `${scopePath()}/conversations/${conversationId}/turns`;
    let started;
    if (files.length) {
      const form = new FormData();
      form.append("message", message);
      if (state.bundle) form.append("bundle", state.bundle);
      form.append("timezone", timezone());
      for (const file of files) form.append("files", file, file.name);
      started = await api(url, { method: "POST", form });
    } else {
      started = await api(url, { method: "POST", json: { message, bundle: state.bundle || undefined, timezone: timezone() } });
    }
    untitled = null;
    clearComposer();
    view.setTurn(started.turn_id);
    await streamTurn(view, started.events_url);
    touchConversation(conversationId, message);
    if (state.running === view) setRunning(null);
    await followNextTurn(view, conversationId);
  } catch (error) {
    if (untitled) forgetProvisionalTitle(untitled);
    if (error.name !== "AbortError") view.fail(error.code, error.message);
  } finally {
    if (state.running === view) setRunning(null);
  }
}

function clearComposer() {
  const input = $("composer-input");
  input.value = "";
  autoGrow(input);
  state.files = [];
  renderFileChips();
}

function autoGrow(textarea) {
  textarea.style.height = "";
  if (!textarea.value) return; // Chromium counts a wrapped placeholder in scrollHeight
  textarea.style.height = `${Math.min(textarea.scrollHeight + 2, 240)}px`;
}

function renderFileChips() {
  const list = $("attachment-list");
  list.replaceChildren(
    ...state.files.map((file, index) =>
      el(
        "li",
        { class: "chip" },
        icon("file"),
        `${file.name} (${formatBytes(file.size)})`,
        el("button", {
          type: "button",
          class: "chip-remove",
          "aria-label": `Remove ${file.name}`,
          text: "×",
          onclick: () => {
            state.files.splice(index, 1);
            renderFileChips();
          },
        }),
      ),
    ),
  );
  list.hidden = state.files.length === 0;
}

// ---------------------------------------------------------------------------------------------------
// Conversations

function retitleConversation(conversationId, title) {
  const meta = state.conversations.get(conversationId);
  if (!meta || !title) return;
  meta.title = title;
  renderConversationList();
}

function touchConversation(conversationId, message) {
  const meta = state.conversations.get(conversationId);
  if (!meta) return;
  meta.title = meta.title || message.slice(0, 80);
  meta.updated_at = new Date().toISOString();
  state.conversations.delete(conversationId);
  state.conversations = new Map([[conversationId, meta], ...state.conversations]);
  renderConversationList();
}

function conversationTitle(conversation) {
  return conversation.title || "Untitled conversation";
}

function renderConversationList() {
  const list = $("conversation-list");
  // a conversation without a title has no accepted message yet (a refused first message leaves it so): not listed
  list.replaceChildren(...[...state.conversations.values()].filter((c) => c.title).map(conversationRow));
  $("conversation-empty").hidden = list.children.length > 0;
  $("load-more").hidden = !state.nextBefore;
  const renaming = list.querySelector(".conversation-rename-input");
  if (renaming) {
    renaming.focus();
    renaming.select();
  }
}

/** One conversation of the list: open it; rename it in place; delete it (after a confirmation). */
function conversationRow(conversation) {
  const title = conversationTitle(conversation);
  if (state.renaming === conversation.id) {
    const input = el("input", {
      class: "conversation-rename-input",
      value: conversation.title || "",
      maxlength: "200",
      "aria-label": `New title of “${title}”`,
      onkeydown: (event) => {
        if (event.key === "Escape") {
          event.preventDefault();
          state.renaming = null;
          renderConversationList();
        }
      },
      onblur: () => {
        if (state.renaming === conversation.id) {
          state.renaming = null;
          renderConversationList();
        }
      },
    });
    const form = el(
      "form",
      {
        class: "conversation-rename",
        onsubmit: (event) => {
          event.preventDefault();
          renameConversation(conversation.id, input.value);
        },
      },
      input,
    );
    return el("li", { class: "conversation-row" }, form);
  }
  return el(
    "li",
    { class: "conversation-row" },
    el(
      "button",
      {
        type: "button",
        class: "conversation-item",
        "data-conversation-id": conversation.id,
        "aria-current": conversation.id === state.conversationId ? "true" : null,
        onclick: () => openConversation(conversation.id),
      },
      el("span", { class: "conversation-title", text: title }),
      el("span", { class: "conversation-meta muted small", text: `${conversation.bundle || ""} · ${relativeTime(conversation.updated_at)}` }),
    ),
    el(
      "span",
      { class: "conversation-actions" },
      el(
        "button",
        {
          type: "button",
          class: "icon-button conversation-action conversation-rename-button",
          title: "Rename",
          "aria-label": `Rename “${title}”`,
          onclick: () => {
            state.renaming = conversation.id;
            renderConversationList();
          },
        },
        icon("pencil"),
      ),
      el(
        "button",
        {
          type: "button",
          class: "icon-button conversation-action conversation-delete-button",
          title: "Delete",
          "aria-label": `Delete “${title}”`,
          onclick: () => deleteConversation(conversation.id),
        },
        icon("trash"),
      ),
    ),
  );
}

/** Give a conversation the title the user typed (``PATCH``); an empty one changes nothing. */
async function renameConversation(conversationId, typed) {
  const title = typed.trim();
  state.renaming = null;
  const meta = state.conversations.get(conversationId);
  if (!title || !meta || title === meta.title) {
    renderConversationList();
    return;
  }
  try {
    const renamed = await api(`${scopePath()}/conversations/${encodeURIComponent(conversationId)}`, {
      method: "PATCH",
      json: { title },
    });
    Object.assign(meta, renamed);
  } catch (error) {
    toast(`The conversation cannot be renamed: ${error.message}`);
  }
  renderConversationList();
}

/** Delete a conversation for good (``DELETE``), once the user confirmed: its turn is stopped, its messages, files
 * and feedback erased on the server. */
async function deleteConversation(conversationId) {
  const meta = state.conversations.get(conversationId);
  if (!meta) return;
  const question = `Delete “${conversationTitle(meta)}”? Its messages, files and feedback are erased for good.`;
  if (!window.confirm(question)) return;
  const open = state.conversationId === conversationId;
  if (open) stopStreaming(); // its turn is cancelled by the server: nothing more to show
  try {
    await api(`${scopePath()}/conversations/${encodeURIComponent(conversationId)}`, { method: "DELETE" });
  } catch (error) {
    if (error.status !== 404) {
      // 404: it was gone already (deleted elsewhere, or its retention ran out)
      toast(`The conversation cannot be deleted: ${error.message}`);
      return;
    }
  }
  state.conversations.delete(conversationId);
  if (open) resetChat();
  renderConversationList();
  toast("Conversation deleted.");
}

async function loadConversations({ reset }) {
  const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (!reset && state.nextBefore) params.set("before", state.nextBefore);
  const page = await api(`${scopePath()}/conversations?${params}`);
  if (reset) state.conversations = new Map();
  for (const item of page.items) state.conversations.set(item.id, item);
  state.nextBefore = page.next_before;
  renderConversationList();
}

function resetChat() {
  stopStreaming();
  state.conversationId = null;
  const messages = $("messages");
  messages.replaceChildren($("empty-state"));
  $("empty-state").hidden = false;
  renderPlan(null);
  renderConversationList();
}

function stopStreaming() {
  if (state.running?.abort) state.running.abort.abort();
  setRunning(null);
}

async function openConversation(conversationId) {
  closeDrawers();
  resetChat();
  state.conversationId = conversationId;
  renderConversationList();
  const token = (state.loadToken += 1);
  let detail;
  try {
    detail = await api(`${scopePath()}/conversations/${encodeURIComponent(conversationId)}`);
  } catch (error) {
    toast(`The conversation cannot be loaded: ${error.message}`);
    return;
  }
  if (token !== state.loadToken) return;
  if (detail.bundle && state.bundles.some((b) => b.id === detail.bundle)) selectBundle(detail.bundle);
  const views = detail.turns.map((turn) => TurnView.fromStored(turn, conversationId));
  for (const view of views) appendTurn(view);
  const running = views.find((view) => !view.finished);
  if (running) {
    setRunning(running);
    const eventsUrl = `${scopePath()}/conversations/${conversationId}/turns/${running.turnId}/events`;
    running.answerText = "";
    streamTurn(running, eventsUrl).finally(() => state.running === running && setRunning(null));
  }
  $("composer-input").focus();
}

// ---------------------------------------------------------------------------------------------------
// Bundles and widgets

function renderBundles() {
  const select = $("bundle-select");
  select.replaceChildren(
    ...state.bundles.map((bundle) =>
      el("option", {
        value: bundle.id,
        text: `${bundle.title || bundle.id}${bundle.default ? " (default)" : ""}${bundle.state !== "loaded" ? ` — ${bundle.state}` : ""}${bundle.load_error && bundle.state === "loaded" ? " ⚠" : ""}`,
        title: bundle.description || "",
      }),
    ),
  );
  select.disabled = state.bundles.length === 0;
  const remembered = localStorage.getItem(STORAGE.bundle(state.tenant, state.project));
  const fallback = state.bundles.find((b) => b.default) || state.bundles[0];
  const chosen = state.bundles.some((b) => b.id === remembered) ? remembered : fallback?.id;
  if (chosen) selectBundle(chosen);
  else renderWidgets(null);
}

function selectBundle(bundleId) {
  state.bundle = bundleId;
  $("bundle-select").value = bundleId;
  const bundle = state.bundles.find((b) => b.id === bundleId) || null;
  renderWidgets(bundle);
  renderBundleWarning(bundle);
}

/** Why the bundle's last load failed, beside the picker: a reload that failed while an older generation still
 * serves (admin keys only: the server tells no one else), or a bundle that serves nothing. */
function renderBundleWarning(bundle) {
  const box = $("bundle-warning");
  const error = bundle?.load_error;
  box.hidden = !error;
  box.open = false;
  if (!error) return;
  const failed = error.generation ? `Generation ${error.generation}` : "The last reload";
  $("bundle-warning-title").textContent =
    error.serving_generation !== null && error.serving_generation !== undefined
      ? `⚠ ${failed} failed to load`
      : "⚠ This bundle failed to load";
  const where = error.file ? `${error.file}${error.line ? `:${error.line}` : ""}` : "";
  $("bundle-warning-body").replaceChildren(
    el("p", {}, el("strong", { text: error.code }), ` ${error.message}`),
    where ? el("p", {}, el("code", { class: "load-error-where", text: where })) : null,
    el("p", {
      class: "muted small",
      text:
        error.serving_generation !== null && error.serving_generation !== undefined
          ? `Generation ${error.serving_generation} still serves. Fix the file and reload the bundle.`
          : "No generation serves: messages to this bundle are refused until it loads.",
    }),
  );
}

function renderWidgets(bundle) {
  const box = $("widgets");
  const widgets = bundle ? bundle.widgets || [] : [];
  const current = [...box.querySelectorAll("iframe")].map((f) => f.getAttribute("src")).join("|");
  if (current === widgets.map((w) => w.url).join("|") && current) return;
  box.replaceChildren(
    ...widgets.map((widget) =>
      el(
        "figure",
        { class: "widget", "data-widget": widget.alias },
        el("figcaption", {}, widget.icon ? `${widget.icon} ` : "", widget.title || widget.alias),
        // Sandboxed without allow-same-origin: a widget cannot read this page's storage (the API key).
        el("iframe", { src: widget.url, title: widget.title || widget.alias, sandbox: "allow-scripts allow-forms", loading: "lazy" }),
      ),
    ),
  );
  $("widgets-empty").hidden = widgets.length > 0;
}

// ---------------------------------------------------------------------------------------------------
// Sign-in and workspace (tenant/project)

function showLogin(message = "") {
  $("app").hidden = true;
  $("login").hidden = false;
  $("login-tenant").value = state.tenant;
  $("login-project").value = state.project;
  const error = $("login-error");
  error.textContent = message;
  error.hidden = !message;
  document.body.dataset.view = "login";
  $("login-key").focus();
}

function showApp() {
  $("login").hidden = true;
  $("app").hidden = false;
  $("sign-out").hidden = !state.key;
  $("account-label").textContent = state.key ? "Signed in with an API key" : "";
  $("tenant-input").value = state.tenant;
  $("project-input").value = state.project;
  document.body.dataset.view = "app";
}

function rememberScope(tenant, project) {
  state.tenant = tenant;
  state.project = project;
  localStorage.setItem(STORAGE.tenant, tenant);
  localStorage.setItem(STORAGE.project, project);
}

async function openScope() {
  document.body.dataset.ready = "false";
  let bundles;
  try {
    bundles = await api(`${scopePath()}/bundles`, { key: state.key });
  } catch (error) {
    if (error.status === 401) {
      const rejected = Boolean(state.key);
      state.key = null;
      localStorage.removeItem(STORAGE.key);
      showLogin(rejected ? "The saved API key was not accepted; sign in again." : "");
      return;
    }
    showApp();
    resetChat();
    state.bundles = [];
    state.conversations = new Map();
    state.nextBefore = null;
    renderBundles();
    renderConversationList();
    const scopeError = $("scope-error");
    scopeError.textContent =
      error.status === 404
        ? `No access to ${state.tenant}/${state.project}: it does not exist or your key does not cover it. Pick another tenant and project above.`
        : `The workspace cannot be opened: ${error.message}`;
    scopeError.hidden = false;
    document.body.dataset.ready = "true";
    return;
  }
  $("scope-error").hidden = true;
  showApp();
  state.bundles = bundles;
  renderBundles();
  resetChat();
  try {
    await Promise.all([loadConversations({ reset: true }), loadRoles()]);
  } catch (error) {
    toast(`Conversations cannot be listed: ${error.message}`);
  }
  document.body.dataset.ready = "true";
}

/** Whether the key is an admin's (``GET /v1/me``): admins get the usage page. */
async function loadRoles() {
  let roles = [];
  try {
    roles = (await api("/v1/me")).roles || [];
  } catch {
    roles = [];
  }
  state.admin = roles.includes("admin");
  $("usage-button").hidden = !state.admin;
}

// ---------------------------------------------------------------------------------------------------
// Usage page (admin keys): GET …/usage per user, bundle, day or model, and the total

const USAGE_COLUMNS = [
  "calls",
  "turns",
  "input_tokens",
  "output_tokens",
  "cache_read_input_tokens",
  "cache_creation_input_tokens",
  "total_tokens",
];

function isoDay(date) {
  return date.toISOString().slice(0, 10);
}

function openUsage() {
  const now = new Date();
  const monthStart = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
  const nextMonth = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));
  if (!$("usage-from").value) $("usage-from").value = isoDay(monthStart);
  if (!$("usage-to").value) $("usage-to").value = isoDay(nextMonth);
  $("usage-scope").textContent = `${state.tenant}/${state.project}`;
  $("usage-dialog").showModal();
  loadUsage();
}

function usageRow(cells, header = false) {
  const [key, ...rest] = cells;
  return el(
    "tr",
    {},
    el(header ? "th" : "td", { scope: header ? "row" : null, text: key }),
    ...rest.map((value) => el("td", { class: "num", text: value })),
  );
}

function usageCells(key, row) {
  const cost = typeof row.cost_usd === "number" ? row.cost_usd.toFixed(4) : "";
  return [key, ...USAGE_COLUMNS.map((name) => NUMBER.format(row[name] || 0)), cost];
}

async function loadUsage() {
  const group = $("usage-group").value;
  const params = new URLSearchParams({
    from: `${$("usage-from").value}T00:00:00Z`,
    to: `${$("usage-to").value}T00:00:00Z`,
    group_by: group,
  });
  const error = $("usage-error");
  error.hidden = true;
  $("usage-table").dataset.loaded = "false";
  let report;
  try {
    report = await api(`${scopePath()}/usage?${params}`);
  } catch (failure) {
    error.textContent = `The usage cannot be read: ${failure.message}`;
    error.hidden = false;
    return;
  }
  $("usage-key-title").textContent = group;
  $("usage-rows").replaceChildren(...report.groups.map((row) => usageRow(usageCells(row.key || "—", row))));
  $("usage-total").replaceChildren(usageRow(usageCells("total", report.total), true));
  $("usage-table").dataset.loaded = "true";
}

async function signIn(event) {
  event.preventDefault();
  const key = $("login-key").value.trim();
  const tenant = $("login-tenant").value.trim() || "default";
  const project = $("login-project").value.trim() || "default";
  const error = $("login-error");
  error.hidden = true;
  try {
    await api(`${scopePath(tenant, project)}/bundles`, { key });
  } catch (failure) {
    error.textContent =
      failure.status === 401
        ? "This API key is not known to the server."
        : failure.status === 404
          ? `The key works, but it does not cover ${tenant}/${project} (or that project does not exist).`
          : failure.message;
    error.hidden = false;
    return;
  }
  state.key = key;
  localStorage.setItem(STORAGE.key, key);
  rememberScope(tenant, project);
  $("login-key").value = "";
  await openScope();
}

function signOut() {
  stopStreaming();
  state.key = null;
  localStorage.removeItem(STORAGE.key);
  openScope();
}

// ---------------------------------------------------------------------------------------------------
// Layout toggles for narrow screens

function toggleDrawer(buttonId, className) {
  const button = $(buttonId);
  const open = !document.body.classList.contains(className);
  closeDrawers();
  document.body.classList.toggle(className, open);
  button.setAttribute("aria-expanded", String(open));
}

function closeDrawers() {
  document.body.classList.remove("sidebar-open", "side-open");
  $("toggle-sidebar").setAttribute("aria-expanded", "false");
  $("toggle-side").setAttribute("aria-expanded", "false");
}

// ---------------------------------------------------------------------------------------------------
// Start-up

function wire() {
  $("login-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", signOut);
  $("scope-form").addEventListener("submit", (event) => {
    event.preventDefault();
    rememberScope($("tenant-input").value.trim(), $("project-input").value.trim());
    openScope();
  });
  $("bundle-select").addEventListener("change", (event) => {
    selectBundle(event.target.value);
    localStorage.setItem(STORAGE.bundle(state.tenant, state.project), event.target.value);
  });
  $("new-conversation").addEventListener("click", () => {
    closeDrawers();
    resetChat();
    $("composer-input").focus();
  });
  $("load-more").addEventListener("click", () => loadConversations({ reset: false }).catch((e) => toast(e.message)));
  const input = $("composer-input");
  input.addEventListener("input", () => autoGrow(input));
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    sendMessage(input.value);
  });
  $("steer-button").addEventListener("click", () => sendMessage(input.value, "steer"));
  $("file-input").addEventListener("change", (event) => {
    state.files.push(...event.target.files);
    event.target.value = "";
    renderFileChips();
  });
  $("stop-button").addEventListener("click", async () => {
    const view = state.running;
    if (!view?.turnId) return;
    try {
      await api(`${scopePath()}/conversations/${view.conversationId}/turns/${view.turnId}/cancel`, { method: "POST" });
      view.setStatus("Stopping…");
    } catch (error) {
      toast(`The turn cannot be stopped: ${error.message}`);
    }
  });
  $("usage-button").addEventListener("click", openUsage);
  $("usage-close").addEventListener("click", () => $("usage-dialog").close());
  $("usage-form").addEventListener("submit", (event) => {
    event.preventDefault();
    loadUsage();
  });
  $("toggle-sidebar").addEventListener("click", () => toggleDrawer("toggle-sidebar", "sidebar-open"));
  $("toggle-side").addEventListener("click", () => toggleDrawer("toggle-side", "side-open"));
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape") closeDrawers();
  });
}

wire();
openScope();
