// The library page: a search over every book's passages (tagged results that open highlighted); every
// document with its format, size, ingest and summary status, filtered by a box and grouped by the folder it
// came from; adding a book by upload (with progress) or by a path on the server; removing one after a
// confirmation.

import { hitPlace } from "./answer.js";
import { ApiError, api, pollJob, uploadFile } from "./api.js";
import { formatBytes, formatDate, h, markedTerms } from "./dom.js";

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

/** The folder a document came from ("don-quijote-es" for "don-quijote-es/01.md"); "" for a single file. */
export function folderOf(source) {
  const path = String(source || "");
  const cut = path.lastIndexOf("/");
  return cut > 0 ? path.slice(0, cut) : "";
}

/** Documents whose title or source holds every word of `filter` (case-insensitive), grouped by folder. */
export function groupDocuments(docs, filter = "") {
  const words = filter.toLowerCase().split(/\s+/).filter(Boolean);
  const groups = new Map();
  for (const doc of docs) {
    const haystack = `${doc.title || ""} ${doc.source || ""}`.toLowerCase();
    if (!words.every((w) => haystack.includes(w))) continue;
    const folder = doc.folder !== undefined ? doc.folder : folderOf(doc.source);
    if (!groups.has(folder)) groups.set(folder, []);
    groups.get(folder).push(doc);
  }
  return [...groups].sort(([a], [b]) => (a === "" ? -1 : b === "" ? 1 : a.localeCompare(b)));
}

function explain(err) {
  return err instanceof ApiError ? err.explanation : err.message;
}

export class Library {
  constructor() {
    this.jobsBusy = 0;
    this.docs = [];
    this.list = h("div", { class: "cv-doc-groups", "data-cv-docs": true, "aria-busy": "true" });
    this.filterInput = h("input", { type: "search", id: "cv-doc-filter", "data-cv-doc-filter": true,
      placeholder: "Filter by title or file", autocomplete: "off", "aria-label": "Filter the books" });
    this.filterInput.addEventListener("input", () => this.renderList());
    this.searchInput = h("input", { type: "search", id: "cv-search", "data-cv-search-input": true, required: true,
      placeholder: "Search every book’s passages", autocomplete: "off" });
    this.searchResults = h("ol", { class: "cv-search-results", "data-cv-search-results": true, "aria-live": "polite" });
    this.searchForm = h("form", { class: "cv-search-form", role: "search", "data-cv-search-form": true },
      h("label", { for: "cv-search", class: "cv-visually-hidden" }, "Search passages"),
      h("div", { class: "cv-add-row" }, this.searchInput,
        h("button", { type: "submit", class: "cv-button cv-button-primary" }, "Search")));
    this.searchForm.addEventListener("submit", (e) => {
      e.preventDefault();
      const query = this.searchInput.value.trim();
      if (query) this.search(query);
    });
    this.fileInput = h("input", { type: "file", id: "cv-upload-file", "data-cv-upload-input": true, required: true });
    this.uploadForm = h("form", { class: "cv-add-form", "data-cv-upload-form": true },
      h("label", { for: "cv-upload-file" }, "Upload a book (EPUB, PDF, Markdown, text, JSONL)"),
      h("div", { class: "cv-add-row" }, this.fileInput,
        h("button", { type: "submit", class: "cv-button cv-button-primary" }, "Upload")));
    this.pathInput = h("input", { type: "text", id: "cv-add-path", "data-cv-path-input": true, required: true,
      placeholder: "/home/me/books or /home/me/books/moby-dick.epub", spellcheck: "false", autocomplete: "off" });
    // Shown only where the server takes paths (settings' path_ingest); when the settings cannot be read (a
    // server with a key not yet given) it is shown, and the server's answer says what is needed.
    this.pathForm = h("form", { class: "cv-add-form", "data-cv-path-form": true, hidden: true },
      h("label", { for: "cv-add-path" }, "…or add a file or folder that is on the server"),
      h("div", { class: "cv-add-row" }, this.pathInput,
        h("button", { type: "submit", class: "cv-button" }, "Add")));
    this.jobs = h("div", { class: "cv-jobs", "data-cv-jobs": true, "aria-live": "polite" });
    this.el = h("div", { class: "cv-library" },
      h("section", { class: "cv-library-docs", "aria-labelledby": "cv-library-title" },
        h("h1", { id: "cv-library-title" }, "Library"), this.searchForm, this.searchResults,
        h("div", { class: "cv-doc-filter" }, this.filterInput), this.list),
      h("section", { class: "cv-library-add", "aria-labelledby": "cv-add-title" },
        h("h2", { id: "cv-add-title" }, "Add a book"), this.uploadForm, this.pathForm, this.jobs));
    this.uploadForm.addEventListener("submit", (e) => {
      e.preventDefault();
      const file = this.fileInput.files && this.fileInput.files[0];
      if (file) this.upload(file);
    });
    api.settings().then((settings) => { this.pathForm.hidden = !settings.path_ingest; },
      () => { this.pathForm.hidden = false; });
    this.pathForm.addEventListener("submit", (e) => {
      e.preventDefault();
      const path = this.pathInput.value.trim();
      if (path) this.addPath(path);
    });
  }

  async refresh() {
    this.list.setAttribute("aria-busy", "true");
    try {
      this.docs = await api.documents();
      this.renderList();
    } catch (err) {
      this.list.replaceChildren(h("p", { class: "cv-error" }, `The library cannot be loaded: ${explain(err)}`));
    }
    this.list.setAttribute("aria-busy", "false");
  }

  /** The documents the filter keeps, one list per folder (books added as single files first). */
  renderList() {
    if (!this.docs.length) {
      this.list.replaceChildren(h("p", { class: "cv-empty" },
        "No books yet. Add one on the right — it is read once and kept in your library."));
      return;
    }
    const groups = groupDocuments(this.docs, this.filterInput.value);
    if (!groups.length) {
      this.list.replaceChildren(h("p", { class: "cv-empty", "data-cv-no-match": true }, "No book matches the filter."));
      return;
    }
    this.list.replaceChildren(...groups.map(([folder, docs]) => h("section", { class: "cv-doc-group",
      "data-cv-doc-group": folder },
      groups.length > 1 || folder ? h("h2", { class: "cv-doc-group-title" },
        folder ? `${folder}/ (${plural(docs.length, "document")})` : "Single files") : null,
      h("ul", { class: "cv-doc-list" }, docs.map((d) => this.row(d))))));
  }

  /** Passages of every book for `query`, each opening its book at the passage, highlighted. */
  async search(query) {
    this.searchResults.setAttribute("aria-busy", "true");
    try {
      const results = await api.search(query);
      this.searchResults.replaceChildren(...(results.length ? results.map((r) => h("li", { class: "cv-search-hit" },
        h("a", { href: `/read/${encodeURIComponent(r.doc_id)}#${r.tag}`, "data-route": true, "data-tag": r.tag,
          class: "cv-search-link" },
        h("span", { class: "cv-search-where" }, hitPlace([r.doc_title, ...(r.toc_path || [])], r.page)),
        h("span", { class: "cv-search-text" },
          ...markedTerms([...r.text].length > 280 ? `${[...r.text].slice(0, 280).join("")}…` : r.text, query)),
        h("code", { class: "cv-search-tag" }, `[${r.tag}]`))))
        : [h("li", { class: "cv-empty" }, `No passage matches “${query}”.`)]));
    } catch (err) {
      this.searchResults.replaceChildren(h("li", { class: "cv-error" }, `Search failed: ${explain(err)}`));
    }
    this.searchResults.setAttribute("aria-busy", "false");
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
    } else if (last.notice) {
      line.replaceChildren(h("span", { class: "cv-notice", "data-cv-job-notice": true }, `${name}: ${last.notice}.`));
    } else {
      const count = (last.document_ids || []).length;
      line.replaceChildren(h("span", { class: "cv-ok" }, `${name}: added ${count} ${count === 1 ? "document" : "documents"}.`));
    }
    this.refresh();
  }
}
