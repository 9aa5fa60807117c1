// Tiny DOM helpers. Text always goes in as text nodes: nothing here parses HTML, so book text,
// answers and titles (all untrusted) stay inert however they look.

/**
 * Create an element. `attrs`: "class", "text" (textContent), "on<event>" functions, booleans
 * (true sets an empty attribute, false/null/undefined skip), anything else via setAttribute.
 * Children: strings become text nodes, arrays are flattened, null/false are skipped.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "text") el.textContent = String(value);
    else if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

/** Append children (strings as text nodes) to `parent`. */
export function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

/** Human-readable size: 1.2 MB. */
export function formatBytes(n) {
  if (!Number.isFinite(n)) return "";
  const units = ["bytes", "KB", "MB", "GB"];
  let value = n;
  let i = 0;
  while (value >= 1024 && i < units.length - 1) {
    value /= 1024;
    i += 1;
  }
  return i === 0 ? `${value} ${units[0]}` : `${value.toFixed(value < 10 ? 1 : 0)} ${units[i]}`;
}

/** A date string from the server as a short local date, or the input when it does not parse. */
export function formatDate(value) {
  if (!value) return "";
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleDateString(undefined, { dateStyle: "medium" });
}

/** Show a short message in the page's status toast. */
export function toast(message, { error = false } = {}) {
  const el = document.querySelector("[data-cv-toast]");
  if (!el) return;
  el.textContent = message;
  el.classList.toggle("cv-toast-error", error);
  el.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => {
    el.hidden = true;
  }, error ? 8000 : 4000);
}

/** True for a plain left click that the app may handle itself (no new tab/window intent). */
export function isPlainClick(event) {
  return event.button === 0 && !event.metaKey && !event.ctrlKey && !event.shiftKey && !event.altKey;
}

/** `text` as nodes with the query's words (three letters or more, any case) in <mark>s: what the reader scans a
 *  hit list for. Whole words only, so "art" does not light up inside "heart". */
export function markedTerms(text, query) {
  const words = [...new Set(String(query).toLowerCase().match(/[\p{L}\p{N}]{3,}/gu) || [])];
  if (!words.length) return [text];
  const escaped = words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  const pattern = new RegExp(`(?<![\\p{L}\\p{N}])(${escaped.join("|")})(?![\\p{L}\\p{N}])`, "giu");
  const nodes = [];
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    if (match.index > last) nodes.push(text.slice(last, match.index));
    nodes.push(h("mark", { class: "cv-search-term" }, match[0]));
    last = match.index + match[0].length;
  }
  if (last < text.length) nodes.push(text.slice(last));
  return nodes;
}

/**
 * Whether a block's line breaks are a hard wrap of prose (a plain-text book's or a PDF's lines), which a reader
 * reflows, rather than verse or a list, whose lines are the text's: two lines at least, the widest 50
 * characters or more, every line but the last at least 0.6 of it unless it ends a sentence (a paragraph's
 * end inside a PDF page), and not most lines opening with a capital (verse). Display only: the text itself, and so every position, stays as stored.
 */
export function hardWrapped(text) {
  const lines = String(text).replace(/\n+$/, "").split("\n").map((line) => line.trim());
  if (lines.length < 2 || lines.some((line) => !line)) return false;
  // the first of three lines or more may be of any width: a sentence quoted from inside a paragraph starts mid-line
  const judged = lines.length > 2 ? lines.slice(1) : lines;
  const widths = judged.map((line) => [...line].length);
  const widest = Math.max(...widths);
  // a short line that ends a sentence ends a paragraph inside the block (a PDF page has no blank lines)
  const short = (line, i) => widths[i] < 0.6 * widest && !/[.!?;:"”’»)]$/.test(line);
  if (widest < 50 || judged.slice(0, -1).some(short) || !widths.slice(0, -1).some((w) => w >= 0.6 * widest)) {
    return false;
  }
  const capitals = lines.filter((line) => /^[\p{Lu}]/u.test(line)).length;
  return capitals < 0.8 * lines.length;
}

/**
 * `text` with the line breaks of its hard-wrapped runs shown as spaces (same length, so offsets into it hold).
 * A run ends at a citation tag (each cited sentence of an answer is judged alone), at a line break after a tag or
 * a colon, and at a blank line; the edges are captured, so the runs join back to the very text.
 */
export function reflowed(text) {
  const parts = String(text).split(/(\[f\d+-\d+-\d+\]|(?<=\]|:)\n|\n(?=[ \t]*\n))/);
  return parts.map((part, i) => (i % 2 === 0 && hardWrapped(part.trim()) ? part.replace(/(?<=\S)\n(?=\S)/g, " ") : part))
    .join("");
}
