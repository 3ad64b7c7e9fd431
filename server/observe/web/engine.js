// tl-serve's engine view: polls GET /engine/snapshot (same origin: the health port) a few
// times a second and draws the KV block pool, the running and waiting sequences, the radix
// tree and a plot of the last minute. The snapshot holds ids, counts and block numbers
// only; everything is still set as textContent, never as HTML. A server with several chat
// models lists their engines (`engines`); the choice is asked for as ?model=ID.
"use strict";

(() => {
  const POLL_MS = 250;
  const WINDOW_S = 60;
  const STATE_NAMES = { f: "free", u: "used", s: "shared", c: "cached" };
  const $ = (id) => document.getElementById(id);
  const cells = [];

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function row(values) {
    const tr = el("tr");
    for (const v of values) tr.append(el("td", "", String(v)));
    return tr;
  }

  function blockList(ids, total) {
    const shown = ids.join(" ");
    return total > ids.length ? `${shown} …(+${total - ids.length})` : shown;
  }

  function drawGrid(blocks) {
    const states = blocks.states;
    const grid = $("grid");
    while (cells.length < states.length) {
      const cell = el("i", "cell f");
      cells.push(cell);
      grid.append(cell);
    }
    while (cells.length > states.length) cells.pop().remove();   // another engine's smaller pool
    for (let i = 0; i < states.length; i++) {
      const name = "cell " + states[i];
      if (cells[i].className !== name) {
        cells[i].className = name;
        cells[i].title = `block ${i}: ${STATE_NAMES[states[i]]}`;
      }
    }
    $("block-counts").textContent = `${blocks.num_blocks} blocks of ${blocks.block_size} tokens: ` +
      `${blocks.used} used, ${blocks.cached} cached, ${blocks.free} free`;
  }

  function drawTables(snap) {
    $("running").replaceChildren(...snap.running.map((s) => row([s.id, s.priority, s.adapter || "base",
      s.prompt_tokens, s.computed_tokens, s.generated_tokens, blockList(s.blocks, s.num_blocks)])));
    $("running-count").textContent = `(${snap.num_running})`;
    $("waiting").replaceChildren(...snap.waiting.map((s) => row([s.id, s.priority, s.tokens,
      s.generated_tokens])));
    $("waiting-count").textContent = `(${snap.num_waiting})`;
  }

  function drawRadix(snap) {
    const items = new Map();
    const root = $("radix");
    root.replaceChildren();
    for (const seg of snap.radix) {           // depth first: a parent comes before its children
      const refs = seg.refs.length ? `refs ${Math.max(...seg.refs)}..${Math.min(...seg.refs)}` : "";
      const li = el("li", "", `blocks ${blockList(seg.blocks, seg.num_blocks)} · ` +
        `${seg.num_blocks} block(s), ${seg.tokens} tokens · ${refs}`);
      const children = el("ul");
      li.append(children);
      items.set(seg.id, children);
      (items.get(seg.parent) || root).append(li);
    }
    $("radix-count").textContent = `(${snap.num_radix_nodes} nodes)`;
  }

  function drawPlot(snap) {
    const canvas = $("plot");
    const g = canvas.getContext("2d");
    const w = canvas.width, h = canvas.height, left = 110;
    g.clearRect(0, 0, w, h);
    const history = snap.history.filter((b) => b.age_s <= WINDOW_S);
    const series = [
      { name: "tokens / step", color: "#2f6fdb", get: (b) => b.tokens_per_step },
      { name: "prefill rows", color: "#e8710a", get: (b) => b.prefill_rows },
      { name: "decode rows", color: "#2ea36b", get: (b) => b.decode_rows },
      { name: "drafted rows", color: "#9aa0a6", get: (b) => b.drafted_rows },
      { name: "accepted drafts", color: "#00897b", get: (b) => b.accepted_rows },
      { name: "preemptions", color: "#b3261e", get: (b) => b.preemptions },
      { name: "prefix hit rate", color: "#8a3ffc", get: (b) => b.prefix_hit_ratio, max: 1 },
    ];
    const laneH = h / series.length;
    g.font = "11px system-ui, sans-serif";
    series.forEach((s, lane) => {
      const top = lane * laneH, base = top + laneH - 6;
      const values = history.map(s.get).filter((v) => v !== null);
      const max = s.max || Math.max(1, ...values);
      g.fillStyle = "#6b7385";
      g.fillText(s.name, 4, top + 14);
      g.fillText(`max ${Number(max.toFixed(2))}`, 4, top + 28);
      g.strokeStyle = "#d9dde5";
      g.beginPath(); g.moveTo(left, base + 0.5); g.lineTo(w, base + 0.5); g.stroke();
      g.fillStyle = s.color;
      const barW = (w - left) / (WINDOW_S / snap.history_bucket_s);
      for (const b of history) {
        const v = s.get(b);
        if (v === null || v === 0) continue;
        const x = w - (b.age_s / WINDOW_S) * (w - left) - barW;
        const barH = Math.max(1, (v / max) * (laneH - 20));
        g.fillRect(x, base - barH, Math.max(1, barW - 1), barH);
      }
    });
  }

  function drawChoice(engines) {
    const select = $("engine-model");
    $("engine-choice").hidden = engines.length < 2;
    if (select.options.length === engines.length) return;
    select.replaceChildren(...engines.map((id) => {
      const option = el("option", null, id);
      option.value = id;
      return option;
    }));
  }

  function draw(snap) {
    drawChoice(snap.engines || []);
    if (!snap.blocks) {                 // embedding models only: no chat engine to draw
      $("summary").textContent = "no chat engine";
      return;
    }
    drawGrid(snap.blocks);
    drawTables(snap);
    drawRadix(snap);
    drawPlot(snap);
    const st = snap.stats;
    $("summary").textContent = `steps ${st.steps_total} · batch ${st.batch_tokens} tokens · ` +
      `preemptions ${st.preemptions_total} · prefix hits ${(st.prefix_hit_ratio * 100).toFixed(0)}%`;
  }

  async function poll() {
    try {
      const chosen = $("engine-model").value;
      const query = chosen ? `?model=${encodeURIComponent(chosen)}` : "";
      const r = await fetch(`/engine/snapshot${query}`, { cache: "no-store" });
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      draw(await r.json());
      $("status").textContent = "";
      document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
    } catch (err) {
      $("status").textContent = `snapshot: ${err.message}`;
    }
    setTimeout(poll, POLL_MS);
  }

  poll();
})();
