// The library page: every document with its format, size, ingest and summary status; adding a
// book by upload (with progress) or by a path on the server; removing one after a confirmation.

import { ApiError, api, pollJob, uploadFile } from "./api.js";
import { formatBytes, formatDate, h } from "./dom.js";

const SUMMARY_LABELS = {
  none: "no summary",
  running: "summarising",
  ready: "summary ready",
  partial: "summary partial",
  extractive: "extractive summary",
};

function summaryText(summary) {
  if (!summary) return "";
  const label = SUMMARY_LABELS[summary.state] || summary.state;
  return summary.state === "running" && summary.total ? `${label} ${summary.done}/${summary.total}` : label;
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function explain(err) {
  return err instanceof ApiError ? err.explanation : err.message;
}

export class Library {
  constructor() {
    this.jobsBusy = 0;
    this.list = h("ul", { class: "cv-doc-list", "data-cv-docs": true, "aria-busy": "true" });
    this.fileInput = h("input", { type: "file", id: "cv-upload-file", "data-cv-upload-input": true, required: true });
    this.uploadForm = h("form", { class: "cv-add-form", "data-cv-upload-form": true },
      h("label", { for: "cv-upload-file" }, "Upload a book (EPUB, PDF, Markdown, text, JSONL)"),
      h("div", { class: "cv-add-row" }, this.fileInput,
        h("button", { type: "submit", class: "cv-button cv-button-primary" }, "Upload")));
    this.pathInput = h("input", { type: "text", id: "cv-add-path", "data-cv-path-input": true, required: true,
      placeholder: "/home/me/books or /home/me/books/moby-dick.epub", spellcheck: "false", autocomplete: "off" });
    this.pathForm = h("form", { class: "cv-add-form", "data-cv-path-form": true },
      h("label", { for: "cv-add-path" }, "…or add a file or folder that is on the server"),
      h("div", { class: "cv-add-row" }, this.pathInput,
        h("button", { type: "submit", class: "cv-button" }, "Add")));
    this.jobs = h("div", { class: "cv-jobs", "data-cv-jobs": true, "aria-live": "polite" });
    this.el = h("div", { class: "cv-library" },
      h("section", { class: "cv-library-docs", "aria-labelledby": "cv-library-title" },
        h("h1", { id: "cv-library-title" }, "Library"), this.list),
      h("section", { class: "cv-library-add", "aria-labelledby": "cv-add-title" },
        h("h2", { id: "cv-add-title" }, "Add a book"), this.uploadForm, this.pathForm, this.jobs));
    this.uploadForm.addEventListener("submit", (e) => {
      e.preventDefault();
      const file = this.fileInput.files && this.fileInput.files[0];
      if (file) this.upload(file);
    });
    this.pathForm.addEventListener("submit", (e) => {
      e.preventDefault();
      const path = this.pathInput.value.trim();
      if (path) this.addPath(path);
    });
  }

  async refresh() {
    this.list.setAttribute("aria-busy", "true");
    try {
      const docs = await api.documents();
      this.list.replaceChildren(...(docs.length ? docs.map((d) => this.row(d))
        : [h("li", { class: "cv-empty" }, "No books yet. Add one on the right — it is read once and kept in your library.")]));
    } catch (err) {
      this.list.replaceChildren(h("li", { class: "cv-error" }, `The library cannot be loaded: ${explain(err)}`));
    }
    this.list.setAttribute("aria-busy", "false");
  }

  row(doc) {
    const facts = [
      (doc.format || "").toUpperCase(),
      formatBytes(doc.size_bytes),
      doc.files !== undefined ? plural(doc.files, doc.format === "pdf" ? "page" : "file") : "",
      doc.chunks !== undefined ? plural(doc.chunks, "passage") : "",
      formatDate(doc.created_at),
    ].filter(Boolean);
    const status = doc.chunks === 0 ? h("span", { class: "cv-badge cv-badge-warn" }, "no text") : h("span", { class: "cv-badge" }, "ingested");
    const remove = h("button", { type: "button", class: "cv-button cv-button-quiet", "data-cv-remove": doc.id,
      "aria-label": `Remove ${doc.title}` }, "Remove");
    const actions = h("div", { class: "cv-doc-actions" }, remove);
    remove.addEventListener("click", () => this.confirmRemove(doc, actions));
    return h("li", { class: "cv-doc", "data-cv-doc": doc.id },
      h("div", { class: "cv-doc-main" },
        h("a", { class: "cv-doc-title", href: `/read/${encodeURIComponent(doc.id)}`, "data-route": true }, doc.title || "Untitled"),
        h("p", { class: "cv-doc-facts" }, facts.join(" · ")),
        h("p", { class: "cv-doc-status" }, status, " ",
          h("span", { class: `cv-badge cv-summary-${doc.summary ? doc.summary.state : "none"}` }, summaryText(doc.summary)))),
      actions);
  }

  /** An inline confirmation instead of window.confirm: keyboard friendly, and styled. */
  confirmRemove(doc, actions) {
    const previous = [...actions.childNodes];
    const cancel = h("button", { type: "button", class: "cv-button" }, "Keep");
    const yes = h("button", { type: "button", class: "cv-button cv-button-danger", "data-cv-confirm-remove": doc.id }, "Remove");
    const restore = () => {
      actions.replaceChildren(...previous);
      previous[0].focus();
    };
    cancel.addEventListener("click", restore);
    yes.addEventListener("click", async () => {
      yes.disabled = true;
      try {
        await api.removeDocument(doc.id);
        this.refresh();
      } catch (err) {
        actions.replaceChildren(...previous);
        this.jobLine().textContent = `Could not remove “${doc.title}”: ${explain(err)}`;
      }
    });
    actions.replaceChildren(h("span", { class: "cv-confirm", role: "group", "aria-label": "Confirm removal" },
      `Remove “${doc.title}” and its passages?`, " ", yes, cancel));
    cancel.focus();
  }

  jobLine() {
    const line = h("div", { class: "cv-job" });
    this.jobs.prepend(line);
    return line;
  }

  async upload(file) {
    const line = this.jobLine();
    const progress = h("progress", { max: "100", value: "0", "data-cv-upload-progress": true, "aria-label": `Uploading ${file.name}` });
    const status = h("span", {}, `Uploading ${file.name}…`);
    line.replaceChildren(progress, status);
    this.uploadForm.reset();
    try {
      const job = await uploadFile(file, (loaded, total) => {
        progress.value = Math.round((loaded / total) * 100);
        status.textContent = `Uploading ${file.name}: ${formatBytes(loaded)} of ${formatBytes(total)}`;
      });
      progress.value = 100;
      await this.follow(job, line, file.name);
    } catch (err) {
      line.replaceChildren(h("span", { class: "cv-error" }, `${file.name}: ${explain(err)}`));
    }
  }

  async addPath(path) {
    const line = this.jobLine();
    line.textContent = `Adding ${path}…`;
    try {
      const job = await api.addPath(path);
      this.pathForm.reset();
      await this.follow(job, line, path);
    } catch (err) {
      line.replaceChildren(h("span", { class: "cv-error" }, `${path}: ${explain(err)}`));
    }
  }

  /** Show a job's progress in `line` until it finishes, then refresh the list. */
  async follow(job, line, name) {
    const progress = h("progress", { max: "1", value: "0", "data-cv-job-progress": true, "aria-label": `Reading ${name}` });
    const status = h("span", {});
    line.replaceChildren(progress, status);
    const last = await pollJob(job, (j) => {
      if (j.total) {
        progress.max = j.total;
        progress.value = j.done;
      } else {
        progress.removeAttribute("value");
      }
      status.textContent = `Reading ${name}: ${j.state}${j.total ? ` ${j.done}/${j.total}` : ""}${j.message ? ` — ${j.message}` : ""}`;
    });
    if (last.state === "failed") {
      line.replaceChildren(h("span", { class: "cv-error" }, `${name}: ${last.error || "failed"}`));
    } else {
      const count = (last.document_ids || []).length;
      line.replaceChildren(h("span", { class: "cv-ok" }, `${name}: added ${count} ${count === 1 ? "document" : "documents"}.`));
    }
    this.refresh();
  }
}
