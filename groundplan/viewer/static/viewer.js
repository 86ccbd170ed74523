// groundplan trace viewer: plain JS, no build step, no network beyond this server.
// Data: viewer/api/runs, viewer/api/runs/<run>, viewer/api/compare/<a>/<b>, viewer/frames/<run>/<safe-id>/<n>.png.
// A bearer token given as #token=... is sent with every request (never put in the URL's query).
"use strict";
(function () {
  const token = new URLSearchParams(location.hash.slice(1)).get("token");
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const $ = (id) => document.getElementById(id);
  let run = null, traces = [], selected = null;

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return e;
  }
  async function getJSON(path) {
    const r = await fetch(path, { headers });
    if (!r.ok) {
      let detail = "";
      try { detail = (await r.json()).detail || ""; } catch (e) { /* no JSON body */ }
      throw new Error(detail || path + ": HTTP " + r.status);
    }
    return r.json();
  }
  const pct = (x) => (x === null || x === undefined ? "—" : (100 * x).toFixed(0) + "%");
  const outcome = (v) => (v === null || v === undefined ? el("span", { class: "na", text: "n/a" })
    : el("span", { class: v ? "ok" : "bad", text: v ? "success" : "failure" }));

  function rate(r) {
    if (!r || r.n === 0) return "—";
    return `${pct(r.rate)} (${r.k}/${r.n}) [${pct(r.lo)}, ${pct(r.hi)}]`;
  }

  function fillSelect(id, values) {
    const s = $(id), keep = s.value;
    s.replaceChildren(el("option", { value: "", text: "all" }), ...values.map((v) => el("option", { value: v, text: v })));
    s.value = values.includes(keep) ? keep : "";
  }

  async function loadRuns() {
    const runs = await getJSON("viewer/api/runs");
    $("run").replaceChildren(...runs.map((r) => el("option", { value: r.name, text: r.name })));
    $("compare").replaceChildren(el("option", { value: "", text: "—" }), ...runs.map((r) => el("option", { value: r.name, text: r.name })));
    if (!runs.length) { $("status").textContent = "no sweeps (no traces.jsonl) in this folder"; return; }
    await loadRun(runs[0].name);
  }

  async function loadRun(name) {
    run = name;
    const data = await getJSON("viewer/api/runs/" + encodeURIComponent(name));
    traces = data.traces;
    fillSelect("filter-planner", [...new Set(traces.map((t) => t.planner))]);
    fillSelect("filter-family", [...new Set(traces.map((t) => t.family))]);
    renderSummary(data.table);
    renderEpisodes();
    await loadComparison();
    $("status").textContent = `${traces.length} episodes` + (data.summary ? " · summary.json present" : "");
  }

  function renderSummary(rows) {
    const t = $("summary");
    t.replaceChildren(el("tr", {}, ...["planner", "family", "n", "execution success", "plan success", "steps"].map((h) => el("th", { text: h }))));
    for (const r of rows) {
      t.append(el("tr", { class: "summary-row" }, el("td", { text: r.planner }), el("td", { text: r.family }),
        el("td", { text: r.n }), el("td", { text: rate(r.execution_success) }), el("td", { text: rate(r.plan_success) }),
        el("td", { text: r.mean_steps.toFixed(1) })));
    }
  }

  function filtered() {
    const p = $("filter-planner").value, f = $("filter-family").value, s = $("filter-success").value;
    return traces.filter((t) => (!p || t.planner === p) && (!f || t.family === f)
      && (!s || String(Boolean(t.execution_success)) === s));
  }

  function renderEpisodes() {
    const rows = filtered(), t = $("episodes");
    $("count").textContent = `(${rows.length} of ${traces.length})`;
    t.replaceChildren(el("tr", {}, ...["instruction", "planner", "family", "steps", "outcome"].map((h) => el("th", { text: h }))));
    for (const tr of rows) {
      const row = el("tr", { class: "episode-row" + (tr.episode_id === selected ? " selected" : ""), "data-id": tr.episode_id },
        el("td", { text: short(tr.instruction, 140), title: tr.instruction }), el("td", { text: tr.planner }), el("td", { text: tr.family }),
        el("td", { text: tr.steps.length }), el("td", {}, outcome(tr.execution_success)));
      row.addEventListener("click", () => showEpisode(tr));
      t.append(row);
    }
  }

  // SayCan Fig. 7: per candidate, the LLM probability, the affordance (value function) and their product.
  function barChart(step, top) {
    const cands = [...step.candidates].sort((a, b) => (b.combined ?? -1e9) - (a.combined ?? -1e9)).slice(0, top);
    if (!cands.length) return el("p", { class: "muted", text: "no candidate scores recorded" });
    const generative = cands.every((c) => c.affordance === null) && cands.some((c) => c.llm !== null && c.llm > 0);
    const prob = (x) => (x === null ? 0 : generative ? Math.max(0, x) : Math.exp(x));
    const maxLLM = Math.max(...cands.map((c) => prob(c.llm)), 1e-9), maxComb = Math.max(...cands.map((c) => prob(c.combined)), 1e-9);
    const rowH = 16, labelW = 210, barW = 150, gap = 8, W = labelW + 3 * (barW + gap), H = 22 + cands.length * rowH;
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("class", "scores");
    const add = (tag, a, text) => { const e = document.createElementNS(ns, tag); for (const k in a) e.setAttribute(k, a[k]);
      if (text !== undefined) e.textContent = text; svg.append(e); return e; };
    const cols = [[generative ? "cosine (LLM)" : "LLM p (normalised)", "#4c78a8"], ["affordance", "#f58518"], ["combined (normalised)", "#54a24b"]];
    cols.forEach(([name], i) => add("text", { x: labelW + i * (barW + gap), y: 12, "font-size": 11 }, name));
    cands.forEach((c, r) => {
      const y = 18 + r * rowH, chosen = c.skill === step.chosen;
      add("text", { x: 0, y: y + 11, "font-size": 11, "font-weight": chosen ? "bold" : "normal" },
        (chosen ? "▶ " : "") + (c.skill.length > 32 ? c.skill.slice(0, 31) + "…" : c.skill));
      const vals = [prob(c.llm) / maxLLM, c.affordance === null ? null : c.affordance, prob(c.combined) / maxComb];
      vals.forEach((v, i) => {
        const x = labelW + i * (barW + gap);
        add("rect", { x, y: y + 2, width: barW, height: rowH - 4, fill: "#eef0f3" });
        if (v !== null) add("rect", { x, y: y + 2, width: Math.max(1, v * barW), height: rowH - 4, fill: cols[i][1], class: "bar bar-" + i });
        else add("text", { x: x + 4, y: y + 11, "font-size": 10, fill: "#888" }, "—");
      });
    });
    return svg;
  }

  async function frameImage(t, name) {
    const img = el("img", { alt: "frame " + name, title: "frame " + name });
    try {
      const r = await fetch(`viewer/frames/${encodeURIComponent(run)}/${encodeURIComponent(t._safe_id)}/${name}`, { headers });
      if (r.ok) img.src = URL.createObjectURL(await r.blob());
    } catch (e) { /* a missing frame leaves an empty box */ }
    return img;
  }

  // The env's name for what went wrong at a step (its StepResult.info, kept in the trace under info.env:
  // error is e.g. EAI's executor error type, "precondition" or "parse"), or that the step did nothing
  // (additional: EAI's additional step), beside the step's outcome.
  function errorType(s) {
    const info = (s.info || {}).env || {};
    if (info.error) return el("span", { class: "bad error-type", text: ` · error type: ${info.error}` });
    if (info.additional) return el("span", { class: "muted error-type", text: " · additional step (its effect already held)" });
    return "";
  }

  // A long instruction (EAI's is its whole ~9,000-character prompt) is cut to its first line in lists and
  // folded in the episode pane, so the steps stay in view; the full text is one click (or hover) away.
  function short(text, n) {
    const first = (text || "").trim().split("\n")[0];
    return first.length > n ? first.slice(0, n - 1) + "…" : (first.length < (text || "").trim().length ? first + " …" : first);
  }

  function instructionBlock(text) {
    if ((text || "").length <= 300) return el("h2", { text });
    return el("details", { class: "instruction" }, el("summary", {}, el("b", { text: short(text, 160) }),
      el("span", { class: "muted", text: ` (${text.length} characters: show all)` })), el("pre", { text }));
  }

  async function showEpisode(t) {
    selected = t.episode_id;
    document.querySelectorAll("tr.episode-row").forEach((r) => r.classList.toggle("selected", r.dataset.id === selected));
    const box = $("episode");
    const gd = t.goal_details || {};
    const goal = el("div", { id: "goal" }, el("b", { text: "Goal check: " }), outcome(t.execution_success),
      " · plan success: ", outcome(t.plan_success),
      gd.satisfied ? ` · satisfied: ${gd.satisfied.join(", ") || "—"}` : "",
      gd.unsatisfied ? ` · unsatisfied: ${gd.unsatisfied.join(", ") || "—"}` : "",
      gd.note ? ` · ${gd.note}` : "", t.error ? el("div", { class: "bad", text: "error: " + t.error }) : "");
    const timeline = el("div", { class: "timeline", id: "timeline" }, ...t.steps.map((s) =>
      el("span", { class: "chip " + (s.done ? "done" : s.success ? "ok" : "bad"), text: `${s.index + 1}. ${s.chosen}` })));
    const legend = el("div", { class: "legend muted" }, "bars:", el("span", { style: "background:#4c78a8" }), "LLM",
      el("span", { style: "background:#f58518" }), "affordance", el("span", { style: "background:#54a24b" }), "combined");
    const steps = t.steps.map((s) => el("div", { class: "step", "data-step": s.index },
      el("h3", {}, `Step ${s.index + 1}: ${s.chosen}`, s.done ? " (done)" : "", " ",
        s.done ? "" : outcome(s.success), errorType(s)),
      s.feedback ? el("div", { class: "feedback" }, el("b", { text: "feedback: " }), s.feedback) : "",
      s.prompt_delta ? el("pre", { class: "prompt-delta", text: s.prompt_delta }) : "",
      barChart(s, 8)));
    const frames = el("div", { class: "frames", id: "frames" });
    box.replaceChildren(instructionBlock(t.instruction),
      el("p", { class: "muted", text: `${t.episode_id} · planner ${t.planner} · family ${t.family} · seed ${t.seed} · LLM ${t.llm}` }),
      goal, el("h2", { text: "Timeline" }), timeline,
      el("h2", { text: `Camera frames (${t._frames.length})` }), frames,
      el("h2", { text: "Steps" }), legend, ...steps);
    if (!t._frames.length) frames.append(el("span", { class: "muted", text: "no frames saved for this episode" }));
    for (const name of t._frames) frames.append(await frameImage(t, name));
  }

  // Run vs run on their shared episodes: the evaluation layer's comparison (groundplan compare), as a table.
  async function loadComparison() {
    const other = $("compare").value, box = $("comparison");
    if (!other || other === run) { box.hidden = true; box.replaceChildren(); return; }
    box.hidden = false;
    box.replaceChildren(el("h2", { text: `A = ${run} vs B = ${other}` }), el("p", { class: "muted", text: "comparing…" }));
    let c;
    try {
      c = await getJSON(`viewer/api/compare/${encodeURIComponent(run)}/${encodeURIComponent(other)}`);
    } catch (e) {
      box.replaceChildren(el("h2", { text: `A = ${run} vs B = ${other}` }), el("p", { class: "bad compare-error", text: e.message }));
      return;
    }
    const ci = (s) => `${pct(s.rate)} (${s.successes}/${s.n}) [${(100 * s.ci[0]).toFixed(0)}, ${pct(s.ci[1])}]`;
    const num = (x) => (x === null || x === undefined ? "—" : Number(x).toPrecision(3));
    const table = el("table", { id: "compare-table" }, el("tr", {}, ...["planner", "shared", "A success", "B success",
      "measure", "only A / only B", "McNemar p", "Holm p", ""].map((h) => el("th", { text: h }))));
    const diffs = el("ul", { class: "compare-diffs" });
    for (const p of c.planners) {
      const tests = p.tests.length ? p.tests : [null];
      tests.forEach((t, i) => table.append(el("tr", { class: "compare-row" },
        el("td", { text: i ? "" : p.planner }), el("td", { text: i ? "" : p.n_shared }),
        el("td", { text: i ? "" : ci(p.success.a) }), el("td", { text: i ? "" : ci(p.success.b) }),
        el("td", { text: t ? t.measure : "—" }), el("td", { text: t ? `${t.a_only} / ${t.b_only}` : "—" }),
        el("td", { text: t ? num(t.p_value) : "—" }), el("td", { text: t ? num(t.p_holm) : "—" }),
        el("td", {}, t ? el("span", { class: t.significant ? "ok" : "na", text: t.significant ? "significant" : "not significant" }) : ""))));
      for (const d of p.differences) {
        diffs.append(el("li", { text: `${p.planner}: ${d.measure} B − A = ${num(d.diff)} [${num(d.ci[0])}, ${num(d.ci[1])}], `
          + `A ${num(d.a_mean)}, B ${num(d.b_mean)}, n = ${d.n_pairs}${d.partial ? " (episodes where both have it)" : ""}` }));
      }
    }
    const only = [c.planners_only_a.length ? `planners only in A: ${c.planners_only_a.join(", ")}` : "",
      c.planners_only_b.length ? `planners only in B: ${c.planners_only_b.join(", ")}` : ""].filter(Boolean).join(" · ");
    box.replaceChildren(el("h2", {}, `A = ${run} vs B = ${other} `,
      el("span", { class: "muted", text: `(${c.n_shared} shared episodes; only in A ${c.only_a}, only in B ${c.only_b})` })),
      table, diffs.children.length ? diffs : "",
      el("p", { class: "muted", text: (only ? only + ". " : "") + "Pairs: same planner, env, task and seed. 95% Wilson intervals; "
        + "exact McNemar on the discordant pairs, Holm-adjusted over the tests shown; differences B − A with 95% intervals." }));
  }

  $("run").addEventListener("change", (e) => loadRun(e.target.value));
  $("compare").addEventListener("change", () => loadComparison().catch((e) => { $("status").textContent = "error: " + e.message; }));
  for (const id of ["filter-planner", "filter-family", "filter-success"]) $(id).addEventListener("change", renderEpisodes);
  loadRuns().catch((e) => { $("status").textContent = "error: " + e.message; });
})();
