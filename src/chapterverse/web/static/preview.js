// The citation preview popover: the exact cited text, its TOC path and "Go to passage".
// One popover serves every footnote; it is a non-modal dialog placed after the message that
// holds the footnote, so Tab moves from it to the rest of the chat in reading order.

import { h } from "./dom.js";

export const PREVIEW_ID = "cv-preview";
const NARROW = "(max-width: 760px)";

export class Preview {
  /**
   * @param {object} options
   * @param {(key: string) => Promise<object>} options.lookup  citation or resolve answer for a tag key
   * @param {(target: {docId: number|string, key: string}) => void} options.onGoto
   */
  constructor({ lookup, onGoto }) {
    this.lookup = lookup;
    this.onGoto = onGoto;
    this.anchor = null;
    this.request = 0;
    this.path = h("p", { class: "cv-preview-path", id: `${PREVIEW_ID}-title`, "data-cv-preview-path": true });
    this.text = h("blockquote", { class: "cv-preview-text", "data-cv-preview-text": true });
    this.where = h("span", { class: "cv-preview-where" });
    this.goto = h("button", { type: "button", class: "cv-button cv-button-primary", "data-cv-goto": true }, "Go to passage");
    this.closeButton = h("button", {
      type: "button", class: "cv-icon-button", "aria-label": "Close preview", "data-cv-preview-close": true,
    }, "×");
    this.el = h("div", {
      class: "cv-preview", id: PREVIEW_ID, role: "dialog", "aria-labelledby": `${PREVIEW_ID}-title`,
      tabindex: "-1", "data-cv-preview": true, hidden: true,
    },
    h("div", { class: "cv-preview-head" }, this.path, this.closeButton),
    this.text,
    h("div", { class: "cv-preview-actions" }, this.where, this.goto));

    document.body.append(this.el); // present from the start, so footnotes' aria-controls always resolve
    this.goto.addEventListener("click", () => this.gotoPassage());
    this.closeButton.addEventListener("click", () => this.close({ restoreFocus: true }));
    this.onKey = (e) => {
      if (e.key === "Escape" && this.anchor) {
        e.preventDefault();
        this.close({ restoreFocus: true });
      }
    };
    this.onPointer = (e) => {
      if (!this.anchor) return;
      if (this.el.contains(e.target) || e.target.closest(".cv-footnote")) return;
      this.close();
    };
    this.onMove = () => this.place();
    document.addEventListener("keydown", this.onKey);
    document.addEventListener("pointerdown", this.onPointer);
    window.addEventListener("resize", this.onMove);
    document.addEventListener("scroll", this.onMove, true);
  }

  get isOpen() {
    return this.anchor !== null;
  }

  /** Open for `anchor` (a .cv-footnote), or close when it is the one already open. */
  toggle(anchor) {
    if (this.anchor === anchor) this.close({ restoreFocus: true });
    else this.open(anchor);
  }

  async open(anchor) {
    if (this.anchor) this.setExpanded(this.anchor, false);
    this.anchor = anchor;
    this.key = anchor.dataset.tag;
    this.docId = null;
    this.setExpanded(anchor, true);
    const message = anchor.closest(".cv-msg");
    if (message) message.after(this.el);
    else document.body.append(this.el);
    this.path.textContent = anchor.getAttribute("aria-label") || "Citation";
    this.text.textContent = "Loading the cited passage…";
    this.text.classList.add("cv-loading");
    this.where.textContent = "";
    this.goto.disabled = true;
    this.el.hidden = false;
    this.place();
    this.el.focus({ preventScroll: true });
    const ticket = ++this.request;
    try {
      const cited = await this.lookup(this.key);
      if (ticket !== this.request) return;
      this.fill(cited);
    } catch (err) {
      if (ticket !== this.request) return;
      this.text.classList.remove("cv-loading");
      this.text.textContent = `The cited passage cannot be shown: ${err.explanation || err.message}`;
    }
    this.place();
  }

  fill(cited) {
    const path = Array.isArray(cited.toc_path) ? cited.toc_path.filter(Boolean) : [];
    const crumbs = path.length ? path : [cited.file_title || cited.doc_title || "Cited passage"];
    this.path.textContent = crumbs.join(" › ");
    this.text.classList.remove("cv-loading");
    this.text.textContent = cited.text;
    const where = [cited.doc_title, cited.label ? `p. ${cited.label}` : ""].filter(Boolean).join(" · ");
    this.where.textContent = where;
    this.docId = cited.doc_id;
    this.goto.disabled = false;
  }

  gotoPassage() {
    if (!this.anchor) return;
    const target = { docId: this.docId, key: this.key };
    this.close();
    this.onGoto(target);
  }

  close({ restoreFocus = false } = {}) {
    const anchor = this.anchor;
    if (!anchor) return;
    this.request += 1;
    this.anchor = null;
    this.setExpanded(anchor, false);
    const hadFocus = this.el.contains(document.activeElement);
    this.el.hidden = true;
    if ((restoreFocus || hadFocus) && anchor.isConnected) anchor.focus({ preventScroll: true });
  }

  setExpanded(anchor, expanded) {
    anchor.setAttribute("aria-expanded", String(expanded));
    anchor.classList.toggle("cv-footnote-open", expanded);
  }

  /** Place next to the footnote (below it, or above when there is no room); a sheet on phones. */
  place() {
    if (!this.anchor) return;
    if (!this.anchor.isConnected) {
      this.close();
      return;
    }
    const style = this.el.style;
    if (window.matchMedia(NARROW).matches) {
      style.top = "";
      style.left = "";
      return;
    }
    const rect = this.anchor.getBoundingClientRect();
    const box = this.el.getBoundingClientRect();
    const margin = 8;
    let top = rect.bottom + 6;
    if (top + box.height > window.innerHeight - margin && rect.top - box.height - 6 > margin) {
      top = rect.top - box.height - 6;
    }
    const left = Math.min(Math.max(margin, rect.left - 24), window.innerWidth - box.width - margin);
    style.top = `${Math.max(margin, top)}px`;
    style.left = `${Math.max(margin, left)}px`;
  }
}
