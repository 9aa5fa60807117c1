// Turns an AnswerResult into DOM: inline tags [f5-123-165] that the result's `citations` hold become numbered
// footnote links, the verifier's findings are marked, and every piece of answer text is a text node (never HTML).
// A tag-shaped string that no citation holds is text: a book can write one, and only citations are verified.

import { h, reflowed } from "./dom.js";
import { PREVIEW_ID } from "./preview.js";

/** A well-formed tag in answer text; group 1 is the tag key (f5-123-165). */
const TAG_RE = /\[(f\d+-\d+-\d+)\]/g;
export const TAG_KEY_RE = /^f(\d+)-(\d+)-(\d+)$/;

/** "[f5-1-9]" or "f5-1-9" -> "f5-1-9". */
export const tagKey = (tag) => String(tag).trim().replace(/^\[/, "").replace(/\]$/, "");

/** The reader URL of a cited passage (what a footnote links to). */
export const passageHref = (docId, key) => `/read/${encodeURIComponent(docId)}#${key}`;

/** The most specific title of a citation or resolve answer: its TOC entry, else file, else book. */
export function citationTitle(c) {
  if (!c) return "";
  const path = Array.isArray(c.toc_path) ? c.toc_path.filter(Boolean) : [];
  return path.length ? String(path[path.length - 1]) : String(c.file_title || c.doc_title || "");
}

/** Where a search hit is: the book and its contents' path, and in a PDF the printed page ("…, p. 134"). */
export function hitPlace(path, page) {
  const where = path.filter(Boolean).join(" › ");
  return page ? `${where}, p. ${page}` : where;
}

/**
 * `text` in quotation marks, without doubling the book's own: a passage that opens or ends with a quotation
 * mark (dialogue, or a sentence that closes one) keeps it instead of getting a second one.
 */
export function quoted(text) {
  const open = /^[“"‘«„]/.test(text) ? "" : "“";
  const close = /[”"’»]$/.test(text) ? "" : "”";
  return `${open}${text}${close}`;
}

/**
 * The start of a cited passage, about `limit` characters cut at a word: what tells apart two citations of
 * one chapter, whose titles are the same.
 */
export function citationSnippet(c, limit = 90) {
  const text = String((c && c.text) || "").replace(/\s+/g, " ").trim();
  if ([...text].length <= limit) return text;
  const head = [...text].slice(0, limit).join("");
  const cut = head.lastIndexOf(" ");
  return `${(cut > limit / 2 ? head.slice(0, cut) : head).replace(/[\s,;:.]+$/, "")}…`;
}

const STATE_LABELS = {
  answered: ["answered", "The reader stands by this answer"],
  unsure: ["unsure", "No answer the reader would stand by: passages that may help"],
  not_found: ["not found", "Nothing in the book answers this"],
};

/** The answer's state and, for an extractive answer, its confidence: "answered · confidence 0.73". */
export function stateLabel(result) {
  const state = result.state || (result.found === false ? "not_found" : "answered");
  const [label, explain] = STATE_LABELS[state] || [state, ""];
  const sure = typeof result.confidence === "number" ? ` · confidence ${result.confidence.toFixed(2)}` : "";
  return { state, text: `${label}${sure}`, explain };
}

const MODE_LABELS = {
  llm: ["model", "Written by the language model from the cited passages"],
  extractive: ["extractive", "Quoted from the book's passages, without a language model"],
};

/**
 * Footnote numbers of the result's citations, in order of first appearance in `answer` (the contract's
 * citations[].n), each with its citation. Only a citation makes a footnote, never a tag found in the text alone.
 */
export function numberTags(answer, citations = []) {
  const byKey = new Map(citations.map((c) => [tagKey(c.tag), c]));
  const numbers = new Map();
  for (const match of answer.matchAll(TAG_RE)) {
    const citation = byKey.get(match[1]);
    if (citation && !numbers.has(match[1])) numbers.set(match[1], { n: numbers.size + 1, citation });
  }
  return numbers;
}

function footnote(key, entry, docId) {
  const { n, citation } = entry;
  const title = citationTitle(citation);
  const snippet = citationSnippet(citation, 60);
  const name = [title, snippet && quoted(snippet)].filter(Boolean).join(", ");
  return h("a", {
    class: "cv-footnote",
    href: passageHref((citation && citation.doc_id) || docId, key),
    "data-tag": key,
    "data-n": n,
    "aria-label": name ? `Citation ${n}: ${name}` : `Citation ${n}`,
    "aria-expanded": "false",
    "aria-controls": PREVIEW_ID,
  }, `[${n}]`);
}

/** Text of a verifier item, which may be a plain string or an object with the text inside. */
function itemText(item) {
  if (typeof item === "string") return item;
  if (item && typeof item === "object") return String(item.text || item.sentence || item.quote || "");
  return "";
}

/** [start, end) of `needle` in `answer`, also trying the answer with its tags removed; or null. */
function locate(answer, needle) {
  const wanted = needle.trim();
  if (!wanted) return null;
  const at = answer.indexOf(wanted);
  if (at !== -1) return [at, at + wanted.length];
  // The verifier may quote sentences without their tags: search the tagless text, map back.
  let stripped = "";
  const origin = [];
  let last = 0;
  for (const match of answer.matchAll(TAG_RE)) {
    for (let i = last; i < match.index; i += 1) origin.push(i);
    stripped += answer.slice(last, match.index);
    last = match.index + match[0].length;
  }
  for (let i = last; i < answer.length; i += 1) origin.push(i);
  stripped += answer.slice(last);
  const loose = stripped.indexOf(wanted);
  if (loose === -1) return null;
  return [origin[loose], origin[loose + wanted.length - 1] + 1];
}

const DECORATIONS = {
  answer: {
    cls: "cv-answer-phrase",
    title: "The likeliest answer phrase: the reader's pick inside the cited sentence",
  },
  unsupported: {
    cls: "cv-unsupported",
    title: "Not supported by the cited passages: the verifier could not find this in the evidence",
  },
  unverified: {
    cls: "cv-unverified",
    title: "Quotation not found verbatim in the book",
  },
};

/** Decoration ranges over `answer`, and the items that could not be located in it. */
function decorations(answer, result) {
  const ranges = [];
  const unplaced = [];
  const lists = [
    ["answer", result.answer_spans],
    ["unsupported", result.unsupported_sentences],
    ["unverified", result.unverified_quotes],
  ];
  for (const [kind, items] of lists) {
    for (const item of items || []) {
      const text = itemText(item);
      const span = locate(answer, text);
      if (span) ranges.push({ start: span[0], end: span[1], ...DECORATIONS[kind] });
      // An answer phrase is emphasis, not a finding: one that cannot be placed is simply not shown.
      else if (text.trim() && kind !== "answer") unplaced.push({ text, ...DECORATIONS[kind] });
    }
  }
  return { ranges, unplaced };
}

/**
 * The answer split into text and tag pieces, text also cut wherever a decoration starts or ends. A tag piece is a
 * cited tag (in `numbers`); while `streaming`, before the citations arrive, any other tag is a "pending" piece,
 * shown as nothing until the finished result says whether it is a citation.
 */
function pieces(answer, ranges, numbers, streaming) {
  const tags = [...answer.matchAll(TAG_RE)]
    .filter((m) => streaming || numbers.has(m[1]))
    .map((m) => ({ start: m.index, end: m.index + m[0].length, key: m[1], pending: !numbers.has(m[1]) }));
  // A decoration edge inside a tag moves to the tag's edge, so a footnote is never cut in two.
  for (const r of ranges) {
    for (const t of tags) {
      if (r.start > t.start && r.start < t.end) r.start = t.start;
      if (r.end > t.start && r.end < t.end) r.end = t.end;
    }
  }
  const cuts = new Set([0, answer.length]);
  for (const r of ranges) cuts.add(r.start).add(r.end);
  const out = [];
  let pos = 0;
  const pushText = (from, to) => {
    const inner = [...cuts].filter((c) => c > from && c < to).sort((a, b) => a - b);
    let a = from;
    for (const b of [...inner, to]) {
      if (b > a) out.push({ start: a, end: b, kind: "text" });
      a = b;
    }
  };
  for (const t of tags) {
    pushText(pos, t.start);
    out.push({ ...t, kind: "tag" });
    pos = t.end;
  }
  pushText(pos, answer.length);
  for (const p of out) p.decos = ranges.filter((r) => r.start <= p.start && p.end <= r.end);
  return out;
}

/**
 * The answer text as a fragment: text nodes, footnote links, and spans marking the answer phrase,
 * unsupported sentences / unverified quotes. Returns {fragment, numbers, unplaced}.
 */
export function answerFragment(result, docId, streaming = false) {
  const answer = String(result.answer || "");
  const shown = reflowed(answer); // hard-wrapped passages as running text; the same length, so every range holds
  const numbers = numberTags(answer, result.citations || []);
  const { ranges, unplaced } = decorations(answer, result);
  const all = pieces(answer, ranges, numbers, streaming);
  const fragment = document.createDocumentFragment();
  let wrapper = null;
  let wrapperKey = "";
  all.forEach((piece, i) => {
    let node;
    if (piece.kind === "tag" && piece.pending) return;
    if (piece.kind === "tag") {
      node = footnote(piece.key, numbers.get(piece.key), docId);
    } else {
      let text = shown.slice(piece.start, piece.end);
      // "stairs [1]." reads better as "stairs[1]." with a superscript: drop spaces before a footnote.
      if (all[i + 1] && all[i + 1].kind === "tag") text = text.replace(/[ \t]+$/, "");
      if (!text) return;
      node = document.createTextNode(text);
    }
    const key = piece.decos.map((d) => d.cls).sort().join(" ");
    if (!key) {
      wrapper = null;
      wrapperKey = "";
      fragment.append(node);
      return;
    }
    if (!wrapper || wrapperKey !== key) {
      wrapper = h("span", { class: key, title: piece.decos.map((d) => d.title).join(". ") });
      wrapperKey = key;
      fragment.append(wrapper);
    }
    wrapper.append(node);
  });
  return { fragment, numbers, unplaced };
}

function plural(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}

/** The verifier's findings that are not inline: dropped tags (grouped by reason), unplaced items. */
function verifierNotes(result, unplaced) {
  const notes = [];
  const byReason = new Map();
  for (const d of result.dropped_tags || []) {
    const reason = (d && d.reason) || "not verified";
    if (!byReason.has(reason)) byReason.set(reason, []);
    byReason.get(reason).push(tagKey((d && d.tag) || ""));
  }
  for (const [reason, tags] of byReason) {
    notes.push(h("li", { class: "cv-dropped", "data-cv-dropped": true },
      `${plural(tags.length, "citation", "citations")} removed by the verifier: ${reason}`,
      h("span", { class: "cv-dropped-tags" }, ` (${tags.filter(Boolean).join(", ")})`)));
  }
  const unsupported = (result.unsupported_sentences || []).length;
  if (unsupported) {
    notes.push(h("li", { class: "cv-unsupported-note", "data-cv-unsupported-note": true },
      h("span", { class: "cv-unsupported" }, "⚠"),
      ` ${plural(unsupported, "sentence", "sentences")} not supported by a cited passage: the model's words, `
      + "not the book's"));
  }
  for (const item of unplaced) {
    notes.push(h("li", {}, h("span", { class: item.cls, title: item.title }, item.text),
      h("span", { class: "cv-note-why" }, ` — ${item.title.toLowerCase()}`)));
  }
  return notes.length ? h("ul", { class: "cv-verifier", "aria-label": "Verifier notes" }, notes) : null;
}

/** The numbered source list under an answer: each entry links to its passage. */
function sourceList(numbers, docId) {
  const items = [];
  for (const [key, { n, citation }] of numbers) {
    const path = citation && Array.isArray(citation.toc_path) ? citation.toc_path.filter(Boolean).join(" › ") : "";
    const label = path || citationTitle(citation) || key;
    const snippet = citationSnippet(citation);
    items.push(h("li", { value: n },
      h("a", { class: "cv-source", href: passageHref((citation && citation.doc_id) || docId, key), "data-tag": key },
        h("span", { class: "cv-source-title" }, label),
        snippet ? h("span", { class: "cv-source-snippet", "data-cv-source-snippet": true }, quoted(snippet)) : null)));
  }
  return items.length ? h("ol", { class: "cv-sources", "aria-label": "Sources" }, items) : null;
}

function stateBadge(result) {
  const { state, text, explain } = stateLabel(result);
  return h("span", { class: `cv-badge cv-state cv-state-${state}`, "data-cv-state": state, title: explain }, text);
}

/**
 * Fill `box` (an assistant message) with a result. `streaming` results are partial: no verifier
 * notes or sources yet. Returns the numbers map (key -> {n, citation}).
 */
export function renderResult(box, result, { docId, streaming = false, meta = {} }) {
  const mode = result.mode || meta.mode;
  const notice = result.notice || meta.notice;
  const children = [];
  if (mode || notice) {
    const [label, explain] = MODE_LABELS[mode] || [mode, ""];
    children.push(h("div", { class: "cv-msg-meta" },
      mode ? h("span", { class: `cv-badge cv-mode-${mode}`, "data-cv-mode-badge": mode, title: explain }, label) : null,
      streaming ? h("span", { class: "cv-typing", "data-cv-step": meta.step || "",
                              "aria-live": "polite" }, meta.step ? `${meta.step}…` : "answering…") : null,
      streaming ? null : stateBadge(result)));
    if (notice) children.push(h("p", { class: "cv-notice", role: "note", "data-cv-notice": true }, notice));
  }
  // Three states (AnswerResult.state): answered; unsure (no answer, but cited passages that may help: a note,
  // not an answer); not found. Results stored before the field existed have only `found`.
  const unsure = !streaming && result.state === "unsure";
  const notFound = !streaming && result.found === false && !unsure;
  box.classList.toggle("cv-not-found", notFound);
  box.classList.toggle("cv-unsure", unsure);
  if (notFound) children.push(h("p", { class: "cv-not-found-label", "data-cv-not-found": true }, "The book does not say"));
  if (unsure) {
    children.push(h("p", { class: "cv-unsure-label", role: "note", "data-cv-unsure": true },
      "Not an answer: the reader is unsure, these passages may help"));
  }
  const { fragment, numbers, unplaced } = answerFragment(result, docId, streaming);
  const text = h("div", { class: "cv-answer-text", "data-cv-answer-text": true });
  text.append(fragment);
  children.push(text);
  if (!streaming) {
    children.push(verifierNotes(result, unplaced), sourceList(numbers, docId));
  }
  box.replaceChildren(...children.filter(Boolean));
  box.setAttribute("aria-busy", streaming ? "true" : "false");
  return numbers;
}
