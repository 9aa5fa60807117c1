// The chat beside an open document: asks over the SSE stream, renders answers progressively,
// keeps chat history and the Markdown export link. Footnote clicks go to the shared Preview.

import { ApiError, api, askStream, exportUrl } from "./api.js";
import { renderResult, tagKey } from "./answer.js";
import { formatDate, h, isPlainClick } from "./dom.js";

export class Chat {
  /**
   * @param {object} doc       the open Document
   * @param {object} deps      {preview, citations: Map<key, citation>, onGoto({docId, key})}
   */
  constructor(doc, { preview, citations, onGoto, onClose }) {
    this.doc = doc;
    this.preview = preview;
    this.citations = citations;
    this.onGoto = onGoto;
    this.chatId = null;
    this.controller = null;
    this.build(onClose);
  }

  build(onClose) {
    this.chatSelect = h("select", { class: "cv-chat-select", "aria-label": "Conversation", "data-cv-chat-select": true },
      h("option", { value: "" }, "New conversation"));
    this.chatSelect.addEventListener("change", () => this.openChat(this.chatSelect.value || null));
    this.exportLink = h("a", { class: "cv-button cv-button-quiet", "data-cv-export": true, hidden: true,
      download: "", title: "Download this conversation as Markdown with deep links" }, "Export");
    this.messages = h("div", { class: "cv-messages", "data-cv-messages": true, role: "log",
      "aria-label": "Conversation", "aria-live": "polite" },
    this.intro());
    this.input = h("textarea", {
      class: "cv-ask-input", rows: "2", "data-cv-ask": true, "aria-label": "Ask a question about this book",
      placeholder: "Ask about this book…  (Enter to send, Shift+Enter for a new line)",
    });
    this.mode = h("select", { class: "cv-mode-select", "aria-label": "Answer mode", "data-cv-mode": true },
      h("option", { value: "auto" }, "Model when available"),
      h("option", { value: "extractive" }, "Quotes only (extractive)"));
    this.send = h("button", { type: "submit", class: "cv-button cv-button-primary", "data-cv-send": true }, "Ask");
    this.stop = h("button", { type: "button", class: "cv-button", "data-cv-stop": true, hidden: true,
      onclick: () => this.controller && this.controller.abort() }, "Stop");
    this.form = h("form", { class: "cv-ask-form", "data-cv-ask-form": true },
      this.input, h("div", { class: "cv-ask-row" }, this.mode, h("span", { class: "cv-spacer" }), this.stop, this.send));
    this.el = h("aside", { class: "cv-chat", "aria-label": "Ask about this book", "data-cv-chat": true },
      h("div", { class: "cv-panel-head" }, h("h2", {}, "Ask"), this.chatSelect,
        h("button", { type: "button", class: "cv-button cv-button-quiet", "data-cv-new-chat": true,
          onclick: () => this.openChat(null) }, "New"),
        this.exportLink,
        h("button", { type: "button", class: "cv-icon-button cv-narrow-only", "aria-label": "Close chat",
          onclick: onClose }, "×")),
      this.messages, this.form);

    this.form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.submit();
    });
    this.input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        this.submit();
      }
    });
    this.messages.addEventListener("click", (e) => this.onClick(e));
  }

  intro() {
    return h("p", { class: "cv-muted cv-chat-intro" },
      "Ask a question about this book. Every claim in the answer cites the exact passage it comes from.");
  }

  onClick(e) {
    const footnote = e.target.closest("a.cv-footnote");
    if (footnote && isPlainClick(e)) {
      e.preventDefault();
      this.preview.toggle(footnote);
      return;
    }
    const source = e.target.closest("a.cv-source");
    if (source && isPlainClick(e)) {
      e.preventDefault();
      const citation = this.citations.get(source.dataset.tag);
      this.onGoto({ docId: citation ? citation.doc_id : this.doc.id, key: source.dataset.tag });
    }
  }

  /** Load the list of earlier conversations about this document. */
  async loadChats() {
    try {
      const chats = await api.chats(this.doc.id);
      this.setChats(chats);
    } catch (err) {
      /* history is optional: the chat still works */
      console.warn("chats unavailable", err);
    }
  }

  setChats(chats) {
    const options = [h("option", { value: "" }, "New conversation")];
    for (const chat of chats) {
      const when = formatDate(chat.created_at);
      options.push(h("option", { value: chat.id }, `${chat.title || "Conversation"}${when ? ` · ${when}` : ""}`));
    }
    this.chatSelect.replaceChildren(...options);
    this.chatSelect.value = this.chatId === null ? "" : String(this.chatId);
  }

  setChatId(id) {
    this.chatId = id;
    this.exportLink.hidden = id === null;
    if (id !== null) this.exportLink.href = exportUrl(id);
  }

  async openChat(id) {
    if (this.controller) this.controller.abort();
    this.preview.close();
    this.setChatId(id === null || id === "" ? null : Number(id));
    this.chatSelect.value = this.chatId === null ? "" : String(this.chatId);
    if (this.chatId === null) {
      this.messages.replaceChildren(this.intro());
      this.input.focus();
      return;
    }
    this.messages.replaceChildren(h("p", { class: "cv-muted" }, "Loading conversation…"));
    try {
      const chat = await api.chat(this.chatId);
      this.messages.replaceChildren();
      for (const message of chat.messages || []) {
        if (message.role === "user") this.addUser(message.content);
        else if (message.role === "assistant") {
          const box = this.addAssistant();
          if (message.result) this.showResult(box, message.result, {});
          else box.replaceChildren(h("div", { class: "cv-answer-text" }, message.content || ""));
        }
      }
    } catch (err) {
      this.messages.replaceChildren(h("p", { class: "cv-error" }, `This conversation cannot be loaded: ${err.explanation || err.message}`));
    }
  }

  addUser(text) {
    const box = h("div", { class: "cv-msg cv-msg-user" }, h("p", {}, text));
    this.messages.append(box);
    return box;
  }

  addAssistant() {
    const box = h("div", { class: "cv-msg cv-msg-assistant", "data-cv-answer": true });
    this.messages.append(box);
    return box;
  }

  showResult(box, result, options) {
    for (const c of result.citations || []) this.citations.set(tagKey(c.tag), c);
    renderResult(box, result, { docId: this.doc.id, ...options });
  }

  async submit() {
    const question = this.input.value.trim();
    if (!question || this.controller) return;
    this.input.value = "";
    const intro = this.messages.querySelector(".cv-chat-intro");
    if (intro) intro.remove();
    this.addUser(question);
    const box = this.addAssistant();
    box.append(h("p", { class: "cv-muted cv-typing" }, "Searching the book…"));
    box.setAttribute("aria-busy", "true");
    this.messages.scrollTop = this.messages.scrollHeight;
    this.controller = new AbortController();
    this.send.disabled = true;
    this.stop.hidden = false;
    const meta = { mode: null, notice: null, step: null };
    let text = "";
    let finished = false;
    const newChat = this.chatId === null;
    try {
      const body = { question, chat_id: this.chatId, mode: this.mode.value };
      for await (const { event, data } of askStream(this.doc.id, body, this.controller.signal)) {
        if (event === "meta") {
          meta.mode = data.mode || null;
          meta.notice = data.notice || null;
          if (data.chat_id !== undefined && data.chat_id !== null) this.setChatId(Number(data.chat_id));
          this.showResult(box, { answer: text }, { streaming: true, meta });
        } else if (event === "status") {
          meta.step = data.text || null;
          if (!text) this.showResult(box, { answer: text }, { streaming: true, meta });
        } else if (event === "delta") {
          meta.step = null;
          text += data.text || "";
          this.showResult(box, { answer: text }, { streaming: true, meta });
          this.follow();
        } else if (event === "done") {
          finished = true;
          this.showResult(box, data, { meta });
          this.follow();
        } else if (event === "error") {
          finished = true;
          box.replaceChildren(h("p", { class: "cv-error", role: "alert" },
            `The answer failed: ${data.message || data.code || "unknown error"}`));
        }
      }
      if (!finished) {
        box.append(h("p", { class: "cv-error", role: "alert" }, "The answer stream ended before the answer was complete."));
      }
    } catch (err) {
      if (err.name === "AbortError") {
        box.append(h("p", { class: "cv-muted" }, "Stopped."));
      } else {
        const message = err instanceof ApiError ? err.explanation : err.message;
        box.replaceChildren(h("p", { class: "cv-error", role: "alert" }, `The question could not be answered: ${message}`));
      }
    } finally {
      box.setAttribute("aria-busy", "false");
      this.controller = null;
      this.send.disabled = false;
      this.stop.hidden = true;
    }
    if (newChat && this.chatId !== null) this.loadChats();
  }

  /** Keep the newest text in view while it streams, unless the reader scrolled up. */
  follow() {
    const m = this.messages;
    if (m.scrollHeight - m.scrollTop - m.clientHeight < 160) m.scrollTop = m.scrollHeight;
  }

  destroy() {
    if (this.controller) this.controller.abort();
  }
}
