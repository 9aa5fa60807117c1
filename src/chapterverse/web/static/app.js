// Entry point: the router (history API) for "/" (library) and "/read/{doc_id}" (reader, with
// deep links "#f5-123-165"), plus the pieces shared by both views.

import { api } from "./api.js";
import { Chat } from "./chat.js";
import { h, isPlainClick, toast } from "./dom.js";
import { Library } from "./library.js";
import { Preview } from "./preview.js";
import { Reader, parseHash } from "./reader.js";
import { Settings } from "./settings.js";
import { setupTheme } from "./theme.js";

const main = document.getElementById("cv-main");
const docTitle = document.querySelector("[data-cv-doc-title]");

/** Citations seen in answers, by tag key: previews show them without a round trip. */
const citations = new Map();

const preview = new Preview({
  lookup: async (key) => citations.get(key) || api.resolve(key),
  onGoto: ({ docId, key }) => navigate(`/read/${encodeURIComponent(docId)}#${key}`),
});

let settings = null;
let view = null; // {kind: "library"} | {kind: "reader", docId, reader, chat}

export function navigate(url, { replace = false } = {}) {
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  route();
}

function setTitle(text) {
  document.title = text ? `${text} — chapterverse` : "chapterverse";
  docTitle.textContent = text || "";
}

function showLibrary() {
  preview.close();
  if (view && view.chat) view.chat.destroy();
  const library = new Library();
  view = { kind: "library", library };
  setTitle("");
  main.replaceChildren(library.el);
  library.refresh();
}

async function showReader(docId, hash) {
  if (view && view.kind === "reader" && view.docId === docId) {
    await view.reader.go(parseHash(hash));
    return;
  }
  preview.close();
  if (view && view.chat) view.chat.destroy();
  view = { kind: "reader", docId };
  const current = view;
  setTitle("");
  main.replaceChildren(h("p", { class: "cv-empty" }, "Opening the book…"));
  let doc;
  try {
    doc = await api.document(docId);
  } catch (err) {
    if (view !== current) return;
    main.replaceChildren(h("div", { class: "cv-empty" },
      h("p", {}, `This book cannot be opened: ${err.explanation || err.message}`),
      h("p", {}, h("a", { href: "/", "data-route": true }, "Back to the library"))));
    return;
  }
  if (view !== current) return;
  setTitle(doc.title);
  const root = h("div", { class: "cv-reader", "data-cv-reader": doc.id });
  const closeChat = () => root.classList.remove("cv-chat-open");
  const reader = new Reader(doc, {
    onNavigate: (newHash) => history.pushState(null, "", `/read/${encodeURIComponent(doc.id)}${newHash}`),
    onForeignFile: (otherDoc) => navigate(`/read/${encodeURIComponent(otherDoc)}${location.hash}`, { replace: true }),
    onWarning: (message) => toast(message, { error: true }),
  });
  const chat = new Chat(doc, {
    preview,
    citations,
    onClose: closeChat,
    onGoto: ({ docId: target, key }) => navigate(`/read/${encodeURIComponent(target)}#${key}`),
  });
  const chatToggle = h("button", { type: "button", class: "cv-button cv-button-primary cv-chat-toggle",
    "data-cv-chat-toggle": true, "aria-label": "Ask about this book",
    onclick: () => {
      root.classList.add("cv-chat-open");
      chat.input.focus();
    } }, "Ask");
  root.append(reader.tocNav, reader.page, chat.el, chatToggle,
    h("div", { class: "cv-scrim", onclick: () => root.classList.remove("cv-toc-open", "cv-chat-open") }));
  Object.assign(current, { reader, chat, root, closeChat });
  main.replaceChildren(root);
  chat.loadChats();
  await reader.go(parseHash(hash));
}

async function route() {
  const path = location.pathname;
  const read = /^\/read\/(\d+)\/?$/.exec(path);
  try {
    if (read) {
      // On a phone the chat drawer covers the text: going to a passage closes it.
      if (view && view.closeChat) view.closeChat();
      await showReader(Number(read[1]), location.hash);
    } else if (path === "/" || path === "") {
      if (!view || view.kind !== "library") showLibrary();
    } else {
      preview.close();
      view = null;
      setTitle("Not found");
      main.replaceChildren(h("div", { class: "cv-empty" }, h("p", {}, "There is no page here."),
        h("p", {}, h("a", { href: "/", "data-route": true }, "Go to the library"))));
    }
  } catch (err) {
    console.error(err);
    toast(`Something went wrong: ${err.message}`, { error: true });
  }
}

document.addEventListener("click", (e) => {
  const link = e.target.closest("a[data-route]");
  if (!link || !isPlainClick(e)) return;
  e.preventDefault();
  navigate(link.getAttribute("href"));
});
window.addEventListener("popstate", () => route());
window.addEventListener("hashchange", () => route());
window.addEventListener("unhandledrejection", (e) => {
  toast(`Something went wrong: ${e.reason && e.reason.message ? e.reason.message : e.reason}`, { error: true });
});

document.querySelector("[data-cv-settings-open]").addEventListener("click", () => {
  if (!settings) settings = new Settings();
  settings.open();
});
setupTheme(document.querySelector("[data-cv-theme-toggle]"));

route();
