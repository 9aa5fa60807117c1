// The settings dialog: chat model provider (base URL, model, API key), what the library uses,
// and this browser's key for a server that requires one. The stored provider key is never
// shown: the server only returns a hint ("…a1b2"), and an empty field keeps the saved key.

import { ApiError, api, serverKey, setServerKey } from "./api.js";
import { h, toast } from "./dom.js";

function field(id, label, input, help) {
  input.id = id;
  return h("div", { class: "cv-field" }, h("label", { for: id }, label), input,
    help ? h("p", { class: "cv-help", id: `${id}-help` }, help) : null);
}

export class Settings {
  constructor() {
    this.baseUrl = h("input", { type: "url", name: "llm_base_url", spellcheck: "false", autocomplete: "off",
      placeholder: "http://localhost:11434/v1" });
    this.model = h("input", { type: "text", name: "llm_model", spellcheck: "false", autocomplete: "off", placeholder: "e.g. llama3.1" });
    this.apiKey = h("input", { type: "password", name: "llm_api_key", autocomplete: "new-password", "data-cv-api-key": true });
    this.clearKey = h("input", { type: "checkbox", name: "clear_key", id: "cv-clear-key" });
    this.embedding = h("output", { class: "cv-readonly", "data-cv-embedding": true });
    this.library = h("output", { class: "cv-readonly", "data-cv-library": true });
    this.access = h("input", { type: "password", name: "server_key", autocomplete: "off" });
    this.status = h("p", { class: "cv-help", role: "status" });
    this.fixedNote = h("p", { class: "cv-help", "data-cv-llm-fixed": true, hidden: true },
      "Set when the server starts: this server has no API key, so the reader cannot change its model. Start it with ",
      h("code", {}, "--llm_base_url URL --llm_model NAME"), " (or the environment, or config.json), or with ",
      h("code", {}, "--api_key"), " to change the model here.");
    this.save = h("button", { type: "submit", class: "cv-button cv-button-primary" }, "Save");
    this.form = h("form", { class: "cv-settings-form", method: "dialog" },
      h("div", { class: "cv-panel-head" }, h("h2", { id: "cv-settings-title" }, "Settings"),
        h("button", { type: "button", class: "cv-icon-button", "aria-label": "Close settings", onclick: () => this.close() }, "×")),
      this.llmFields = h("fieldset", {}, h("legend", {}, "Chat model (any OpenAI-compatible endpoint)"),
        this.fixedNote,
        field("cv-llm-base", "Base URL", this.baseUrl),
        field("cv-llm-model", "Model", this.model),
        field("cv-llm-key", "API key", this.apiKey, "Leave empty to keep the saved key."),
        h("div", { class: "cv-check" }, this.clearKey, h("label", { for: "cv-clear-key" }, "Remove the saved key"))),
      h("fieldset", {}, h("legend", {}, "Library"),
        h("div", { class: "cv-field" }, h("span", { class: "cv-label" }, "Embedding model in use"), this.embedding),
        h("div", { class: "cv-field" }, h("span", { class: "cv-label" }, "Library location"), this.library)),
      h("fieldset", {}, h("legend", {}, "This browser"),
        field("cv-server-key", "Server access key", this.access,
          "Only needed when the server was started with an API key. Kept in this browser's storage.")),
      h("div", { class: "cv-dialog-actions" }, this.status,
        h("button", { type: "button", class: "cv-button", onclick: () => this.close() }, "Cancel"), this.save));
    this.el = h("dialog", { class: "cv-dialog", "aria-labelledby": "cv-settings-title", "data-cv-settings": true }, this.form);
    this.form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.submit();
    });
    document.body.append(this.el);
  }

  show(settings) {
    const llm = settings.llm || {};
    this.baseUrl.value = llm.base_url || "";
    this.model.value = llm.model || "";
    this.apiKey.value = "";
    this.clearKey.checked = false;
    this.editable = settings.llm_editable !== false;
    this.llmFields.disabled = !this.editable;
    this.fixedNote.hidden = this.editable;
    this.clearKey.disabled = !llm.api_key_set;
    this.apiKey.placeholder = llm.api_key_set ? `Saved (${llm.api_key_hint || "hidden"})` : "Not set";
    this.embedding.textContent = settings.embedding_model
      ? `${settings.embedding_model}${settings.embedding_dim ? ` (${settings.embedding_dim} dimensions)` : ""}` : "unknown";
    this.library.textContent = settings.library || "unknown";
  }

  async open() {
    this.status.textContent = "";
    this.access.value = serverKey();
    this.llmFields.disabled = true; // until the server's values arrive: they would overwrite what was typed
    if (!this.el.open) this.el.showModal();
    try {
      this.show(await api.settings());
    } catch (err) {
      this.llmFields.disabled = false;
      this.status.textContent = `Settings cannot be loaded: ${err instanceof ApiError ? err.explanation : err.message}`;
    }
  }

  close() {
    if (this.el.open) this.el.close();
  }

  async submit() {
    setServerKey(this.access.value.trim());
    if (this.editable === false) { // only this browser's key can change here
      this.close();
      toast("Settings saved.");
      return;
    }
    const changes = { llm_base_url: this.baseUrl.value.trim(), llm_model: this.model.value.trim() };
    if (this.clearKey.checked) changes.llm_api_key = "";
    else if (this.apiKey.value) changes.llm_api_key = this.apiKey.value;
    this.save.disabled = true;
    try {
      this.show(await api.saveSettings(changes));
      this.close();
      toast("Settings saved.");
    } catch (err) {
      this.status.textContent = `Not saved: ${err instanceof ApiError ? err.explanation : err.message}`;
    } finally {
      this.save.disabled = false;
    }
  }
}
