// Offsets from the server are Unicode code points (Python str indices); JavaScript strings are
// UTF-16. The two differ only after characters outside the Basic Multilingual Plane (emoji,
// 𝔘, ...), which take two UTF-16 units but one code point. Combining marks (e + U+0301) are
// separate code points in both, so they need no special care.
//
// CodePointIndex scans a text once and keeps the code-point positions of its astral characters;
// converting is then a binary search, so a 1 MB chapter costs one pass and a small array.

export class CodePointIndex {
  /** @param {string} text */
  constructor(text) {
    this.text = text;
    /** Code-point positions of characters that take two UTF-16 units, ascending. */
    this.astral = [];
    let cp = 0;
    // for..of iterates by code point; a lone surrogate comes through as one unit, as in Python.
    for (const ch of text) {
      if (ch.length === 2) this.astral.push(cp);
      cp += 1;
    }
    /** Length in code points. */
    this.length = cp;
  }

  /** UTF-16 index of code-point offset `cp` (clamped to the text). */
  toUnit(cp) {
    const c = Math.max(0, Math.min(this.length, Math.trunc(cp)));
    return c + countBelow(this.astral, c);
  }

  /** Code-point offset of UTF-16 index `unit` (a unit inside a pair counts as its start). */
  toCodePoint(unit) {
    const u = Math.max(0, Math.min(this.text.length, Math.trunc(unit)));
    // The k-th astral char (0-based) at code point a sits at unit a + k; find how many start before u.
    let lo = 0;
    let hi = this.astral.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.astral[mid] + mid < u) lo = mid + 1;
      else hi = mid;
    }
    // lo astral chars start before u and each took one extra unit. (When u is the second unit
    // of a pair this yields that character's own offset.)
    return u - lo;
  }

  /** The text of code-point range [start, end), like Python's text[start:end]. */
  slice(start, end) {
    return this.text.slice(this.toUnit(start), this.toUnit(end));
  }
}

/** Number of entries of ascending `sorted` that are < `value`. */
function countBelow(sorted, value) {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
