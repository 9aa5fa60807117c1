// The HTTP client for docs/READER_API.md: JSON calls, an XHR upload with progress, job polling
// and a Server-Sent-Events reader over fetch (POST bodies rule out EventSource).

const SERVER_KEY = "chapterverse.serverKey";

/** An error answer from the server ({"code","message"}) or a network failure (status 0). */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
  }

  /** A sentence for the person using the reader. Only a 401 asks for the access key: a 403 (adding by server
   *  path switched off, another origin, settings on a server without a key) is not solved by one. */
  get explanation() {
    if (this.status === 401) {
      return `${this.message} — this server needs an access key: set it under Settings › This browser.`;
    }
    if (this.status === 413) return "That file is larger than this server accepts.";
    if (this.status === 0) return `The server cannot be reached (${this.message}).`;
    return this.message;
  }
}

/** The key for write endpoints, kept in this browser only (empty when the server has none). */
export function serverKey() {
  try {
    return localStorage.getItem(SERVER_KEY) || "";
  } catch (_) {
    return "";
  }
}

export function setServerKey(value) {
  try {
    if (value) localStorage.setItem(SERVER_KEY, value);
    else localStorage.removeItem(SERVER_KEY);
  } catch (_) {
    /* storage disabled: the key lasts for this page only */
  }
}

function authHeaders(extra = {}) {
  const key = serverKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

/** A path segment, escaped. */
export const seg = (value) => encodeURIComponent(String(value));

async function errorFrom(response) {
  let code = `HTTP_${response.status}`;
  let message = response.statusText || `HTTP ${response.status}`;
  try {
    const body = await response.json();
    if (body && typeof body === "object") {
      code = body.code || code;
      message = body.message || (typeof body.detail === "string" ? body.detail : message);
    }
  } catch (_) {
    /* not JSON */
  }
  return new ApiError(response.status, code, message);
}

async function request(method, path, { body, signal } = {}) {
  const init = { method, signal, headers: authHeaders({ Accept: "application/json" }) };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "NETWORK", err.message || "network error");
  }
  if (!response.ok) throw await errorFrom(response);
  return response.status === 204 ? null : response.json();
}

export const api = {
  documents: () => request("GET", "/api/documents").then((r) => r.documents || []),
  document: (docId) => request("GET", `/api/documents/${seg(docId)}`),
  search: (query, docId = null) => request("GET", `/api/search?${new URLSearchParams(
    docId === null ? { q: query } : { q: query, doc_id: String(docId) })}`).then((r) => r.results || []),
  summaries: (docId) => request("GET", `/api/documents/${seg(docId)}/summaries`).then((r) => r.segments || []),
  removeDocument: (docId) => request("DELETE", `/api/documents/${seg(docId)}`),
  addPath: (path) => request("POST", "/api/documents/path", { body: { path } }).then((r) => r.job),
  job: (jobId, signal) => request("GET", `/api/jobs/${seg(jobId)}`, { signal }),
  file: (fileId) => request("GET", `/api/files/${seg(fileId)}`),
  resolve: (tagKey) => request("GET", `/api/resolve/${seg(tagKey)}`),
  chats: (docId) => request("GET", `/api/chats?doc_id=${seg(docId)}`).then((r) => r.chats || []),
  chat: (chatId) => request("GET", `/api/chats/${seg(chatId)}`),
  settings: () => request("GET", "/api/settings"),
  saveSettings: (changes) => request("PUT", "/api/settings", { body: changes }),
};

export const exportUrl = (chatId) => `/api/chats/${seg(chatId)}/export?format=md`;

/**
 * Upload one file as multipart `file`; resolves to the Job. XHR because fetch has no upload
 * progress. `onProgress(loaded, total)` is called as bytes go out.
 */
export function uploadFile(file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/api/documents");
    for (const [name, value] of Object.entries(authHeaders({ Accept: "application/json" }))) {
      xhr.setRequestHeader(name, value);
    }
    xhr.upload.addEventListener("progress", (e) => {
      if (e.lengthComputable) onProgress(e.loaded, e.total);
    });
    xhr.addEventListener("load", () => {
      let body = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch (_) {
        /* not JSON */
      }
      if (xhr.status >= 200 && xhr.status < 300 && body && body.job) resolve(body.job);
      else reject(new ApiError(xhr.status, (body && body.code) || `HTTP_${xhr.status}`,
        (body && body.message) || xhr.statusText || `upload failed (HTTP ${xhr.status})`));
    });
    xhr.addEventListener("error", () => reject(new ApiError(0, "NETWORK", "upload failed")));
    xhr.addEventListener("abort", () => reject(new ApiError(0, "ABORTED", "upload cancelled")));
    const form = new FormData();
    form.append("file", file, file.name);
    xhr.send(form);
  });
}

/** Poll a job until it is done or failed, calling `onUpdate(job)` each time; resolves to the last Job. */
export async function pollJob(job, onUpdate, { interval = 600, signal } = {}) {
  let current = job;
  onUpdate(current);
  while (current.state !== "done" && current.state !== "failed") {
    await new Promise((r) => setTimeout(r, interval));
    if (signal && signal.aborted) throw new DOMException("aborted", "AbortError");
    current = await api.job(current.id, signal);
    onUpdate(current);
  }
  return current;
}

/**
 * Incremental text/event-stream parser (WHATWG rules: "event:"/"data:" fields, multi-line data
 * joined with "\n", ":" comments, a blank line dispatches, CR, LF or CRLF line ends).
 */
export class SSEParser {
  constructor() {
    this.buffer = "";
    this.event = "";
    this.data = [];
  }

  /** Feed decoded text; returns the events completed by it as [{event, data}] (data is a string). */
  feed(text) {
    this.buffer += text;
    const events = [];
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer);
      if (!match) break;
      // A CR at the very end may be the first half of a CRLF split across chunks: wait for more.
      if (match[0] === "\r" && match.index === this.buffer.length - 1) break;
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      this.line(line, events);
    }
    return events;
  }

  /** End of stream: a trailing event without its blank line is discarded, as the spec says. */
  end() {
    const events = [];
    if (this.buffer.endsWith("\r")) this.line(this.buffer.slice(0, -1), events);
    this.buffer = "";
    return events;
  }

  line(line, events) {
    if (line === "") {
      if (this.data.length) events.push({ event: this.event || "message", data: this.data.join("\n") });
      this.event = "";
      this.data = [];
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
  }
}

/**
 * POST a question and yield the stream's events as {event, data} with `data` parsed from JSON.
 * Throws ApiError when the server refuses the request before streaming.
 */
export async function* askStream(docId, body, signal) {
  let response;
  try {
    response = await fetch(`/api/documents/${seg(docId)}/ask`, {
      method: "POST",
      signal,
      headers: authHeaders({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify(body),
    });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "NETWORK", err.message || "network error");
  }
  if (!response.ok) throw await errorFrom(response);
  if (!response.body) throw new ApiError(0, "NO_STREAM", "this browser cannot read streamed answers");
  const reader = response.body.getReader();
  const decoder = new TextDecoder("utf-8");
  const parser = new SSEParser();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      const text = done ? decoder.decode() : decoder.decode(value, { stream: true });
      const events = parser.feed(text);
      if (done) events.push(...parser.end());
      for (const item of events) yield { event: item.event, data: parseData(item.data) };
      if (done) return;
    }
  } finally {
    // Also runs when the consumer stops early (Stop button): close the connection.
    reader.cancel().catch(() => {});
  }
}

function parseData(raw) {
  try {
    return JSON.parse(raw);
  } catch (_) {
    return { text: raw };
  }
}
