// tl-serve's chat page: streams answers from POST /v1/chat/completions with fetch and a
// small SSE reader. Rule: text from the model or the user is only ever set as
// textContent (never parsed as HTML), so an answer like <img onerror=...> stays text.
// A turn that fails (the server refused it, or the stream broke) stays on screen, marked,
// but leaves the history: the next request does not send it again.
"use strict";

(() => {
  const KEY_STORAGE = "tlserve.api_key";      // sessionStorage only: gone with the tab
  const $ = (id) => document.getElementById(id);
  const state = { model: null, messages: [], controller: null };

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function say(text) { $("status").textContent = text; }

  function headers() {
    const h = { "Content-Type": "application/json" };
    const key = $("api-key").value.trim();
    if (key) h.Authorization = "Bearer " + key;
    return h;
  }

  async function loadModel() {
    try {
      const r = await fetch("/v1/models", { headers: headers() });
      if (!r.ok) { say(`GET /v1/models: ${await errorText(r)}`); return; }
      const doc = await r.json();
      const chat = doc.data.find((m) => m.kind === "chat") || doc.data[0];   // the first chat model
      state.model = chat.id;
      $("model").textContent = state.model;
      say("");
    } catch (err) { say(`GET /v1/models failed: ${err.message}`); }
  }

  async function errorText(response) {
    try {
      const doc = await response.json();
      return `HTTP ${response.status}: ${doc.error.message}`;
    } catch (_) { return `HTTP ${response.status}`; }
  }

  function numberOf(id) {
    const text = $(id).value.trim();
    return text === "" ? undefined : Number(text);
  }

  function requestBody() {
    const messages = [];
    const system = $("system").value;
    if (system.trim()) messages.push({ role: "system", content: system });
    messages.push(...state.messages);
    const body = { model: state.model, messages, stream: true,
                   stream_options: { include_usage: true } };
    const fields = { temperature: "temperature", top_p: "top-p", max_tokens: "max-tokens",
                     seed: "seed" };
    for (const [name, id] of Object.entries(fields)) {
      const value = numberOf(id);
      if (value !== undefined) body[name] = value;
    }
    return body;
  }

  // Yields the data of each SSE event ("data: ..." lines joined), in order.
  async function* sseData(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block.split("\n").filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).replace(/^ /, "")).join("\n");
        if (data) yield data;
      }
    }
  }

  function addMessage(role, text) {
    const root = el("div", `msg ${role}`);
    const body = el("div", "text", text);
    root.append(body);
    $("log").append(root);
    root.scrollIntoView({ block: "end" });
    return { root, body };
  }

  function copyText(text, button) {
    const done = () => { button.textContent = "copied"; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, () => fallbackCopy(text, done));
    } else { fallbackCopy(text, done); }
  }

  function fallbackCopy(text, done) {
    const area = el("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
    done();
  }

  function showMeta(view, answer, t) {
    const meta = el("div", "meta");
    const tokens = t.usage ? t.usage.completion_tokens : t.pieces;
    const parts = [];
    if (t.usage) parts.push(`${t.usage.prompt_tokens} prompt + ${tokens} completion tokens`);
    else parts.push(`~${tokens} tokens`);
    if (t.first !== null) {
      const ttftMs = t.first - t.sent;
      const decodeS = (t.end - t.first) / 1000;
      parts.push(`TTFT ${ttftMs.toFixed(0)} ms`);
      if (tokens > 1 && decodeS > 0) parts.push(`${((tokens - 1) / decodeS).toFixed(1)} tok/s`);
      view.root.dataset.ttftMs = ttftMs.toFixed(1);
    }
    parts.push(t.finish || "");
    for (const part of parts) if (part) meta.append(el("span", "", part));
    const copy = el("button", "copy", "copy");
    copy.type = "button";
    copy.addEventListener("click", () => copyText(answer, copy));
    meta.append(copy);
    view.root.append(meta);
    view.root.dataset.tokens = String(tokens);
    view.root.dataset.finish = t.finish || "";
  }

  async function send() {
    const text = $("input").value;
    if (!text.trim() || state.controller) return;
    if (!state.model) await loadModel();
    $("input").value = "";
    const history = state.messages;             // Clear during the stream starts a new one
    const turn = { role: "user", content: text };
    history.push(turn);
    const asked = addMessage("user", text);
    const view = addMessage("assistant", "");
    view.root.classList.add("streaming");
    const controller = new AbortController();
    state.controller = controller;
    setBusy(true);
    const t = { sent: performance.now(), first: null, end: 0, usage: null, pieces: 0, finish: "" };
    let answer = "";
    try {
      const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(),
        body: JSON.stringify(requestBody()), signal: controller.signal });
      if (!r.ok) throw new Error(await errorText(r));
      for await (const data of sseData(r)) {
        if (data === "[DONE]") break;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        if (chunk.usage) t.usage = chunk.usage;
        const choice = chunk.choices && chunk.choices[0];
        if (!choice) continue;
        const piece = choice.delta && choice.delta.content;
        if (piece) {
          if (t.first === null) t.first = performance.now();
          t.pieces += 1;
          answer += piece;
          view.body.textContent = answer;            // text, never HTML
          view.root.scrollIntoView({ block: "end" });
        }
        if (choice.finish_reason) t.finish = choice.finish_reason;
      }
    } catch (err) {
      if (err.name === "AbortError") t.finish = "stopped";
      else { t.finish = "error"; view.root.append(el("div", "error", err.message)); }
    } finally {
      t.end = performance.now();
      if (t.finish === "error") leaveOut(history, turn, [asked, view]);
      else if (answer) history.push({ role: "assistant", content: answer });
      view.root.classList.remove("streaming");
      showMeta(view, answer, t);
      view.root.dataset.done = "1";
      state.controller = null;
      setBusy(false);
    }
  }

  // A failed turn: out of the history (so never sent again), kept on screen, marked.
  function leaveOut(history, turn, views) {
    const at = history.indexOf(turn);
    if (at >= 0) history.splice(at, 1);
    for (const view of views) {
      view.root.classList.add("failed");
      view.root.dataset.failed = "1";
      view.root.title = "failed: not part of the conversation sent to the model";
    }
    views[views.length - 1].root.append(el("div", "note", "Left out of the conversation: " +
                                               "the next message does not send it again."));
  }

  function toggleSettings() {
    const open = $("settings").classList.toggle("open");
    $("settings-toggle").setAttribute("aria-expanded", String(open));
  }

  function setBusy(busy) {
    $("send").disabled = busy;
    $("stop").disabled = !busy;
  }

  function stop() { if (state.controller) state.controller.abort(); }

  function clear() {
    stop();
    state.messages = [];
    $("log").replaceChildren();
  }

  function init() {
    const key = $("api-key");
    key.value = sessionStorage.getItem(KEY_STORAGE) || "";
    key.addEventListener("change", () => {
      if (key.value) sessionStorage.setItem(KEY_STORAGE, key.value);
      else sessionStorage.removeItem(KEY_STORAGE);
      loadModel();
    });
    $("composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
    $("input").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
    });
    $("stop").addEventListener("click", stop);
    $("clear").addEventListener("click", clear);
    $("settings-toggle").addEventListener("click", toggleSettings);
    loadModel();
  }

  init();
})();
