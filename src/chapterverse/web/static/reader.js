// The reader: TOC, file/page navigation, the canonical text as paragraphs, and exact highlights.
//
// A file is rendered as a sequence of "segments" that together hold every character of its
// text: each paragraph from the API is a <p data-start data-end>, and the text between them
// (blank lines) is a <span class="cv-gap"> whose whitespace collapses away. So a highlight of any
// code-point range [start, end) wraps exactly those characters in <mark>s, one per segment, and
// the marks' text joined equals the cited text, even across paragraphs.

import { api } from "./api.js";
import { TAG_KEY_RE, hitPlace, passageHref } from "./answer.js";
import { CodePointIndex } from "./codepoints.js";
import { h, hardWrapped, isPlainClick, markedTerms } from "./dom.js";

/** "#f5-10-20" -> {file, start, end}; "#f5-10" -> {file, offset}; "#f5" -> {file}; else null. */
export function parseHash(hash) {
  const value = decodeURIComponent(String(hash || "").replace(/^#/, ""));
  let m = TAG_KEY_RE.exec(value);
  if (m) return { file: Number(m[1]), start: Number(m[2]), end: Number(m[3]), key: value };
  m = /^f(\d+)-(\d+)$/.exec(value);
  if (m) return { file: Number(m[1]), offset: Number(m[2]) };
  m = /^f(\d+)$/.exec(value);
  return m ? { file: Number(m[1]) } : null;
}

/** Nest a flat TOC ([{title, level, file, offset}]) into a <ul> tree by level. */
function tocTree(entries, docId) {
  const root = h("ul", { class: "cv-toc-list" });
  const stack = [{ level: -Infinity, list: root }];
  for (const entry of entries) {
    const level = Number(entry.level) || 0;
    while (stack.length > 1 && stack[stack.length - 1].level >= level) stack.pop();
    let parent = stack[stack.length - 1];
    if (!parent.list) {
      parent.list = h("ul", { class: "cv-toc-list" });
      parent.item.append(parent.list);
    }
    const link = h("a", {
      href: `/read/${encodeURIComponent(docId)}#f${entry.file}-${entry.offset || 0}`,
      "data-file": entry.file, "data-offset": entry.offset || 0, class: "cv-toc-link",
    }, entry.title || "Untitled");
    const item = h("li", {}, link);
    parent.list.append(item);
    stack.push({ level, item, list: null });
  }
  return root;
}

/**
 * The file a book opens at: the first with text to read. An EPUB's cover or frontispiece is an image page
 * with no text; opening there would greet the reader with an empty page.
 */
export function firstReadableFile(files) {
  return files.find((f) => f.has_text !== false && (f.length === undefined || f.length > 0)) || files[0];
}

/** A Markdown thematic break or setext underline: a line of three or more -, =, _ or * (spaces allowed). */
const MARKDOWN_RULE = /^ {0,3}(?:(?:-[ \t]*){3,}|(?:=[ \t]*){3,}|(?:_[ \t]*){3,}|(?:\*[ \t]*){3,})$/;

/**
 * A paragraph [start, end) of a Markdown file cut where its last line is an underline or rule: [[start, cut,
 * false], [cut, end, true]] (the second part is markup, drawn as a rule or not at all), else [[start, end, false]].
 * Cutting in two keeps every character in exactly one segment, so highlights stay exact.
 */
export function markdownParts(index, start, end) {
  const text = index.slice(start, end);
  const lastBreak = text.lastIndexOf("\n");
  const lastLine = text.slice(lastBreak + 1);
  if (!MARKDOWN_RULE.test(lastLine)) return [[start, end, false]];
  const cut = lastBreak < 0 ? start : start + [...text.slice(0, lastBreak)].length;
  return cut > start ? [[start, cut, false], [cut, end, true]] : [[start, end, true]];
}

/**
 * A summary's text as nodes: its words as text, each position tag of this book (`fileIds`) as a link that opens the
 * passage. A summary cites only its own part of the book, so a tag of another file is text, whatever wrote it.
 */
function summaryNodes(text, docId, fileIds) {
  const nodes = [];
  let last = 0;
  for (const m of String(text).matchAll(/\[(f(\d+)-\d+-\d+)\]/g)) {
    if (!fileIds.has(Number(m[2]))) continue;
    nodes.push(text.slice(last, m.index));
    nodes.push(h("a", { class: "cv-summary-tag", href: passageHref(docId, m[1]), "data-tag": m[1],
      title: "Open the passage", "aria-label": `passage ${m[1]}` }, "↗"));
    last = m.index + m[0].length;
  }
  nodes.push(text.slice(last));
  return nodes;
}

function fileLabel(doc, file) {
  if (doc.format === "pdf") return `Page ${file.label || file.ordinal + 1}`;
  return file.title || file.label || `Part ${file.ordinal + 1}`;
}

/** A title as a contents page prints it and as the TOC stores it compare equal: "ETYMOLOGY." = "Etymology". */
export function titleKey(text) {
  return String(text).normalize("NFKC").toLowerCase().replace(/[^\p{L}\p{N}]+/gu, " ").trim();
}

/**
 * Where each title of the book leads: its TOC entries, then its parts' titles (a part's start), by titleKey.
 * A title that leads to two places (each story's "I", "II") leads nowhere: a link must not guess.
 */
export function titleTargets(toc, files) {
  const targets = new Map();
  const ambiguous = new Set();
  const add = (title, target) => {
    const key = titleKey(title || "");
    if (key.length < 2 || ambiguous.has(key)) return;
    const known = targets.get(key);
    if (!known) targets.set(key, target);
    else if (known.file !== target.file || known.offset !== target.offset) {
      targets.delete(key);
      ambiguous.add(key);
    }
  };
  for (const entry of toc || []) add(entry.title, { file: entry.file, offset: entry.offset || 0 });
  const tocKeys = new Set(targets.keys());
  for (const file of files || []) {
    if (!tocKeys.has(titleKey(file.title || ""))) add(file.title, { file: file.id, offset: 0 });
  }
  return targets;
}

/** The fewest lines, and the least share of a part's paragraphs, that make it a contents page of its own. */
const CONTENTS_PAGE_LINES = 3;
const CONTENTS_PAGE_SHARE = 0.4;

/**
 * A book's own contents page (an EPUB's "Contents", "Brief Contents"): the paragraphs of `fileId` that are
 * titles of other parts, [{start, end, target}], when there are enough of them to make it one; else [].
 * Matching whole paragraphs to the book's titles, not the page's own links, which ingest does not keep.
 */
export function contentsLines(index, spans, fileId, targets) {
  const lines = [];
  for (const [start, end] of spans) {
    const target = end - start <= 200 ? targets.get(titleKey(index.slice(start, end))) : undefined;
    if (target && target.file !== fileId) lines.push({ start, end, target });
  }
  return lines.length >= CONTENTS_PAGE_LINES && lines.length >= CONTENTS_PAGE_SHARE * spans.length ? lines : [];
}

export class Reader {
  /**
   * @param {object} doc   GET /api/documents/{id}
   * @param {object} hooks {onNavigate(hash, {replace})} keeps the URL in step with the page
   */
  constructor(doc, hooks) {
    this.doc = doc;
    this.hooks = hooks;
    this.files = [...(doc.files || [])].sort((a, b) => a.ordinal - b.ordinal);
    this.titleTargets = titleTargets(doc.toc, this.files);
    this.cache = new Map();
    this.current = null; // {file, index, segments}
    this.loading = 0;
    this.build();
  }

  build() {
    const doc = this.doc;
    this.tocNav = h("nav", { class: "cv-toc", "aria-label": "Table of contents", "data-cv-toc": true },
      h("div", { class: "cv-panel-head" }, h("h2", {}, "Contents"),
        h("button", { type: "button", class: "cv-icon-button cv-narrow-only", "aria-label": "Close contents",
          onclick: () => this.toggleToc(false) }, "×")));
    this.searchInput = h("input", { type: "search", "data-cv-book-search": true, required: true,
      placeholder: "Search this book", autocomplete: "off", "aria-label": "Search this book" });
    this.searchResults = h("ol", { class: "cv-search-results cv-book-search-results", "data-cv-book-results": true,
      "aria-live": "polite" });
    const searchForm = h("form", { class: "cv-book-search", role: "search" }, this.searchInput);
    searchForm.addEventListener("submit", (e) => {
      e.preventDefault();
      const query = this.searchInput.value.trim();
      if (query) this.search(query);
    });
    this.tocNav.append(searchForm, this.searchResults);
    if ((doc.toc || []).length) this.tocNav.append(tocTree(doc.toc, doc.id));
    else this.tocNav.append(h("p", { class: "cv-muted" }, "This book has no table of contents."));
    this.summaries = h("section", { class: "cv-summaries", "data-cv-summaries": true, "aria-label": "Summaries" });
    this.tocNav.append(this.summaries);
    this.loadSummaries();
    this.tocNav.addEventListener("click", (e) => {
      const tag = e.target.closest("a.cv-summary-tag, a.cv-search-link");
      if (tag && isPlainClick(e)) {
        e.preventDefault();
        this.toggleToc(false);
        this.hooks.onNavigate(`#${tag.dataset.tag}`);
        this.go(parseHash(tag.dataset.tag));
        return;
      }
      const link = e.target.closest("a.cv-toc-link, a.cv-summary-link");
      if (!link || !isPlainClick(e)) return;
      e.preventDefault();
      this.toggleToc(false);
      const target = { file: Number(link.dataset.file), offset: Number(link.dataset.offset) };
      this.hooks.onNavigate(`#f${target.file}-${target.offset}`);
      this.go(target);
    });

    this.prevButton = h("button", { type: "button", class: "cv-button", "data-cv-prev": true,
      onclick: () => this.step(-1) }, "‹ Previous");
    this.nextButton = h("button", { type: "button", class: "cv-button", "data-cv-next": true,
      onclick: () => this.step(1) }, "Next ›");
    this.select = h("select", { class: "cv-file-select", "aria-label": doc.format === "pdf" ? "Page" : "Section",
      "data-cv-file-select": true },
    this.files.map((f) => h("option", { value: f.id }, fileLabel(doc, f))));
    this.select.addEventListener("change", () => {
      const file = Number(this.select.value);
      this.hooks.onNavigate(`#f${file}`);
      this.go({ file });
    });
    this.label = h("span", { class: "cv-page-label", "data-cv-page-label": true, "aria-live": "polite" });
    this.article = h("article", { class: "cv-text", "data-cv-text": true, tabindex: "-1" });
    this.article.addEventListener("click", (e) => {
      const link = e.target.closest("a.cv-contents-link");
      if (!link || !isPlainClick(e)) return;
      e.preventDefault();
      const target = { file: Number(link.dataset.file), offset: Number(link.dataset.offset) };
      this.hooks.onNavigate(`#f${target.file}-${target.offset}`);
      this.go(target);
    });
    this.endNav = h("div", { class: "cv-end-nav" });
    this.page = h("section", { class: "cv-page", "aria-label": "Book text", "data-cv-page": true },
      h("div", { class: "cv-pagebar" },
        h("button", { type: "button", class: "cv-button cv-narrow-toc", "aria-label": "Show contents",
          "data-cv-toc-toggle": true, onclick: () => this.toggleToc() }, "☰"),
        this.prevButton, h("div", { class: "cv-page-where" }, this.select, this.label), this.nextButton),
      this.article, this.endNav);
  }

  /** Each segment's summary under the TOC, when the book has any: a map of what every part says. */
  async loadSummaries() {
    let segments;
    try {
      segments = await api.summaries(this.doc.id);
    } catch {
      return; // the TOC works without them
    }
    const made = segments.filter((s) => s.summary);
    if (!made.length) {
      this.summaries.replaceChildren(h("p", { class: "cv-muted" },
        "No summaries yet: the first question about this book asked with a chat model starts them (set one under ",
        "Settings), or run ", h("code", {}, `chapterverse summarize --doc ${this.doc.id}`),
        ", which without a model makes extractive ones."));
      return;
    }
    const items = made.map((s) => h("details", { class: "cv-summary", "data-cv-summary": s.seq },
      h("summary", {}, (s.title_path || []).join(" › ") || this.doc.title),
      h("p", {}, summaryNodes(s.summary, this.doc.id, new Set(this.files.map((f) => f.id))), " ", h("a", {
        class: "cv-summary-link", href: `/read/${encodeURIComponent(this.doc.id)}#f${s.file}-${s.offset}`,
        "data-file": s.file, "data-offset": s.offset,
      }, "Read this part ›"))));
    this.summaries.replaceChildren(h("h3", {}, `Summaries (${made.length} of ${segments.length} parts)`), ...items);
  }

  /** This book's passages for `query`, each a link that opens the passage highlighted. */
  async search(query) {
    this.searchResults.setAttribute("aria-busy", "true");
    try {
      const results = await api.search(query, this.doc.id);
      this.searchResults.replaceChildren(...(results.length ? results.map((r) => h("li", { class: "cv-search-hit" },
        h("a", { class: "cv-search-link", href: passageHref(this.doc.id, r.tag), "data-tag": r.tag },
          h("span", { class: "cv-search-where" }, hitPlace(r.toc_path && r.toc_path.length ? r.toc_path : [this.doc.title], r.page)),
          h("span", { class: "cv-search-text" },
            ...markedTerms([...r.text].length > 160 ? `${[...r.text].slice(0, 160).join("")}…` : r.text, query)))))
        : [h("li", { class: "cv-muted" }, `No passage matches “${query}”.`)]));
    } catch (err) {
      this.searchResults.replaceChildren(h("li", { class: "cv-error" }, `Search failed: ${err.explanation || err.message}`));
    }
    this.searchResults.setAttribute("aria-busy", "false");
  }

  toggleToc(open) {
    const root = this.tocNav.closest(".cv-reader");
    if (root) root.classList.toggle("cv-toc-open", open);
  }

  fileMeta(fileId) {
    return this.files.find((f) => f.id === fileId) || null;
  }

  async load(fileId) {
    if (!this.cache.has(fileId)) this.cache.set(fileId, api.file(fileId).catch((err) => {
      this.cache.delete(fileId);
      throw err;
    }));
    return this.cache.get(fileId);
  }

  /**
   * Show a place: {file} (its start), {file, offset} (scroll there) or {file, start, end, key}
   * (highlight that range). Without a file, the first file.
   */
  async go(target) {
    const fileId = target && Number.isFinite(target.file) ? target.file : (firstReadableFile(this.files) || {}).id;
    if (fileId === undefined) {
      this.article.replaceChildren(h("p", { class: "cv-empty" }, "This document has no files."));
      return;
    }
    const ticket = ++this.loading;
    if (!this.current || this.current.file.id !== fileId) {
      this.article.setAttribute("aria-busy", "true");
      let file;
      try {
        file = await this.load(fileId);
      } catch (err) {
        if (ticket !== this.loading) return;
        this.article.replaceChildren(h("p", { class: "cv-error" }, `This part cannot be shown: ${err.explanation || err.message}`));
        this.article.removeAttribute("aria-busy");
        return;
      }
      if (ticket !== this.loading) return;
      if (file.doc_id !== undefined && Number(file.doc_id) !== Number(this.doc.id) && this.hooks.onForeignFile) {
        // A deep link to another book's file: open that book instead of showing it here.
        this.hooks.onForeignFile(file.doc_id);
        return;
      }
      this.render(file);
    }
    if (target && Number.isFinite(target.start) && Number.isFinite(target.end)) {
      if (target.end > this.current.index.length && this.hooks.onWarning) {
        this.hooks.onWarning("This citation reaches past the end of the text; only the part that exists is highlighted.");
      }
      this.highlight(target.start, target.end, target.key);
      this.markToc(target.start);
    } else {
      this.clearHighlight();
      if (target && Number.isFinite(target.offset)) {
        this.scrollToOffset(target.offset);
        this.markToc(target.offset);
      } else {
        this.page.scrollTo({ top: 0 });
        window.scrollTo({ top: 0 });
        this.markToc(0);
      }
    }
  }

  step(delta) {
    if (!this.current) return;
    const i = this.files.findIndex((f) => f.id === this.current.file.id) + delta;
    if (i < 0 || i >= this.files.length) return;
    const file = this.files[i].id;
    this.hooks.onNavigate(`#f${file}`);
    this.go({ file });
  }

  render(file) {
    const index = new CodePointIndex(file.text || "");
    const segments = [];
    const nodes = [];
    const addGap = (start, end) => {
      if (end <= start) return;
      const el = h("span", { class: "cv-gap", "data-start": start, "data-end": end }, index.slice(start, end));
      segments.push({ start, end, el });
      nodes.push(el);
    };
    let spans = (file.paragraphs || []).map(([s, e]) => [Number(s), Number(e)])
      .filter(([s, e]) => e > s).sort((a, b) => a[0] - b[0]);
    if (!spans.length && index.length) spans = [[0, index.length]];
    const markdown = this.doc.format === "markdown";
    const contents = new Map(contentsLines(index, spans, file.id, this.titleTargets).map((l) => [l.start, l]));
    let pos = 0;
    for (const [rawStart, rawEnd] of spans) {
      const start = Math.max(rawStart, pos);
      const end = Math.min(rawEnd, index.length);
      if (end <= start) continue;
      addGap(pos, start);
      for (const [a, b, rule] of markdown ? markdownParts(index, start, end) : [[start, end, false]]) {
        // A rule after a heading line is its setext underline (hidden); alone, a thematic break (a line).
        // A hard-wrapped paragraph (plain text, a PDF's lines) reflows; verse keeps its lines. CSS only: the
        // text nodes, and so every highlight's offsets, are the stored text.
        const cls = !rule ? (hardWrapped(index.slice(a, b)) ? { class: "cv-reflow" } : {})
          : { class: a > start ? "cv-md-underline" : "cv-md-rule", "aria-hidden": "true" };
        const el = h(rule ? "span" : "p", { ...cls, "data-start": a, "data-end": b });
        const line = !rule && contents.get(a);
        // A contents line is a link to its part; the link holds the text, so a highlight marks inside it.
        const holder = line ? h("a", { class: "cv-contents-link", "data-file": line.target.file,
          "data-offset": line.target.offset,
          href: `/read/${encodeURIComponent(this.doc.id)}#f${line.target.file}-${line.target.offset}` }) : el;
        holder.textContent = index.slice(a, b);
        if (line) el.append(holder);
        segments.push({ start: a, end: b, el: holder, paragraph: !rule ? el : null });
        nodes.push(el);
      }
      pos = end;
    }
    addGap(pos, index.length);
    if (file.has_text === false || !index.length) {
      nodes.push(h("p", { class: "cv-empty" }, this.emptyMessage(file)));
    }
    this.article.replaceChildren(...nodes);
    this.article.dataset.file = file.id;
    this.article.removeAttribute("aria-busy");
    this.current = { file, index, segments };
    this.updateNav(file);
  }

  /** Why a part shows no text: a PDF page may be a scan; an EPUB part without text is an image page. */
  emptyMessage(file) {
    if (file.has_text !== false) return "This part has no text.";
    if (this.doc.format === "pdf") {
      return "This page has no text layer (it is a scanned image), so there is nothing to read or cite here.";
    }
    const next = this.files.slice(this.files.findIndex((f) => f.id === file.id) + 1).find((f) => f.has_text !== false);
    return `This part is a picture (a cover or an illustration) with no text to read or cite${next ? "; the text goes on at the next part" : ""}.`;
  }

  updateNav(file) {
    const i = this.files.findIndex((f) => f.id === file.id);
    this.prevButton.disabled = i <= 0;
    this.nextButton.disabled = i === -1 || i >= this.files.length - 1;
    this.select.value = String(file.id);
    const meta = this.fileMeta(file.id) || file;
    const label = this.doc.format === "pdf" && file.label ? `p. ${file.label} · ${i + 1} of ${this.files.length}`
      : `${i + 1} of ${this.files.length}`;
    this.label.textContent = label;
    this.endNav.replaceChildren();
    const next = this.files[i + 1];
    if (next) {
      this.endNav.append(h("button", { type: "button", class: "cv-button", onclick: () => this.step(1) },
        `Next: ${fileLabel(this.doc, next)} ›`));
    }
    for (const link of this.tocNav.querySelectorAll("a.cv-toc-link")) {
      link.classList.toggle("cv-toc-here", Number(link.dataset.file) === meta.id);
    }
  }

  /** aria-current on the TOC entry for `offset` of the current file: the last one at or before it. */
  markToc(offset) {
    const links = [...this.tocNav.querySelectorAll("a.cv-toc-link")];
    let here = null;
    for (const link of links) {
      link.removeAttribute("aria-current");
      if (Number(link.dataset.file) === this.current.file.id && Number(link.dataset.offset) <= offset) here = link;
    }
    here = here || links.find((l) => Number(l.dataset.file) === this.current.file.id);
    if (here) {
      here.setAttribute("aria-current", "location");
      if (!this.tocNav.closest(".cv-toc-open")) here.scrollIntoView({ block: "nearest" });
    }
  }

  clearHighlight() {
    if (!this.current) return;
    for (const seg of this.current.segments) {
      if (seg.el.querySelector("mark")) seg.el.textContent = this.current.index.slice(seg.start, seg.end);
    }
  }

  /**
   * Wrap code points [start, end) of the current file in <mark class="cv-highlight"> (one per
   * segment it touches) and scroll the first into view. Returns the marks.
   */
  highlight(start, end, key = "") {
    this.clearHighlight();
    const { index, segments } = this.current;
    const from = Math.max(0, Math.min(start, index.length));
    const to = Math.max(from, Math.min(end, index.length));
    const marks = [];
    for (const seg of segments) {
      if (seg.end <= from || seg.start >= to) continue;
      const a = Math.max(from, seg.start);
      const b = Math.min(to, seg.end);
      const mark = h("mark", { class: "cv-highlight", "data-tag": key });
      mark.textContent = index.slice(a, b);
      seg.el.replaceChildren(index.slice(seg.start, a), mark, index.slice(b, seg.end));
      marks.push(mark);
    }
    const first = marks.find((m) => !m.parentElement.matches(".cv-gap, .cv-md-underline")) || marks[0];
    if (first) {
      first.setAttribute("tabindex", "-1");
      first.scrollIntoView({ block: "center" });
      first.focus({ preventScroll: true });
    }
    return marks;
  }

  /** Scroll so the paragraph holding code point `offset` is at the top. */
  scrollToOffset(offset) {
    const paragraphs = this.current.segments.filter((s) => s.paragraph);
    let target = paragraphs[0];
    for (const seg of paragraphs) {
      if (seg.start <= offset) target = seg;
      else break;
    }
    if (target) target.paragraph.scrollIntoView({ block: "start" });
  }
}
