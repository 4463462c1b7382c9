// shou eval's report: the case list, its filters, and each sample's transcript and trace, built from the page's
// JSON blocks. Everything in them comes from a run and is untrusted: it only ever becomes text (append of a
// string, textContent), never markup, and never an attribute that loads or runs anything.
(() => {
  "use strict";
  const PAGE = 100; // cases shown at once: a run of 10,000 cases stays a short page until asked for more
  const D = JSON.parse(document.getElementById("data").textContent);
  const MARK = { pass: "✓", fail: "✗", error: "!" };
  const blocks = new Map();
  let contents = null;

  // ------------------------------------------------------------------------------------------- helpers

  function el(tag, cls, ...kids) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    for (const k of kids) {
      if (k !== null && k !== undefined && k !== false) e.append(k instanceof Node ? k : String(k));
    }
    return e;
  }
  const pre = (text, cls) => el("pre", cls, text);
  const money = (c, known) => {
    if (c === null || c === undefined) return known > 0 ? "≥ " + money(known) : "unknown";
    if (c === 0) return "$0";
    return "$" + c.toFixed(c >= 1 ? 2 : c >= 0.0001 ? 4 : 6);
  };
  const secs = (s) => {
    if (s === null || s === undefined) return "–";
    if (s < 10) return s.toFixed(2) + " s";
    if (s < 60) return s.toFixed(1) + " s";
    return Math.floor(s / 60) + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
  };
  const num = (n) => (n || 0).toLocaleString("en-US");
  const count = (n, noun) => `${num(n)} ${noun}${n === 1 ? "" : "s"}`;
  // as Python's shlex.quote, so a command can be pasted into a shell whatever the names hold
  const quote = (s) => (/^[\w@%+=:,./-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\"'\"'") + "'");
  const pretty = (args) => {
    try { return JSON.stringify(JSON.parse(args), null, 2); } catch { return String(args ?? ""); }
  };
  const usageText = (u) => (u ? (u.estimated ? "~" : "") +
    `${num(u.input_tokens)}/${num(u.output_tokens)}/${num(u.cached_tokens)}` : "–");
  const block = (id) => {
    if (!blocks.has(id)) blocks.set(id, JSON.parse(document.getElementById(id).textContent));
    return blocks.get(id);
  };
  const getContents = () => (contents ??= JSON.parse(document.getElementById("contents").textContent));
  function lazy(summary, build, cls = "part") {
    // a <details> whose body is built the first time it opens: a page of many samples stays light
    const d = el("details", cls, el("summary", null, ...[].concat(summary)));
    d.addEventListener("toggle", () => {
      if (d.open && !d.dataset.built) { d.dataset.built = "1"; d.append(...build()); }
    });
    return d;
  }
  function facts(pairs) {
    const dl = el("dl", "facts");
    for (const [k, v] of pairs) if (v !== null && v !== undefined && v !== "") dl.append(el("dt", null, k), el("dd", null, v));
    return dl;
  }

  // ------------------------------------------------------------------------------------------- transcript

  function contentText(content) {
    if (content === null || content === undefined) return "";
    if (typeof content === "string") return content;
    if (!Array.isArray(content)) return JSON.stringify(content);
    return content.map((p) => (p && p.type === "text" ? p.text : p && p.type === "image_url"
      ? `[image, ${num(p.size)} characters of data]` : JSON.stringify(p))).join("");
  }

  function message(m) {
    if (!m || typeof m !== "object") return pre(JSON.stringify(m));
    if (m._pruned) return el("p", "note", "pruned: retention deleted this message's content");
    const role = String(m.role || "?");
    const who = role === "tool" ? `tool result · ${m.name || "?"}` : role;
    const box = el("div", "msg " + role.replace(/[^a-z]/g, ""), el("div", "who", who));
    const text = contentText(m.content);
    if (text) box.append(pre(text));
    for (const c of Array.isArray(m.tool_calls) ? m.tool_calls : []) {
      const fn = (c && c.function) || {};
      box.append(el("div", null, el("span", "call-name", "→ " + (fn.name || "?")), " ", el("span", "dim", c.id || "")),
        pre(pretty(fn.arguments)));
    }
    return box;
  }

  function transcript(sessions) {
    const out = [];
    sessions.forEach((s, i) => {
      if (sessions.length > 1) out.push(el("h4", null, `Task ${i + 1} · session ${s.name}`));
      if (s.note) out.push(el("p", "note", s.note));
      if (s.summary) out.push(el("div", "msg system", el("div", "who", "summary of earlier messages"), pre(s.summary)));
      for (const m of s.transcript || []) out.push(message(m));
      if (!s.note && !(s.transcript || []).length) out.push(el("p", "note", "no messages logged"));
    });
    return out;
  }

  // ------------------------------------------------------------------------------------------- trace

  function request(call) {
    const r = call.request || {};
    if (!r.recorded) return [el("p", "note", "request not recorded (a log from before shou kept requests)")];
    const all = getContents();
    const out = (r.refs || []).map((k) => message(all[k] ?? { _pruned: k }));
    const tools = r.tools_ref ? all[r.tools_ref] : [];
    if (Array.isArray(tools) && tools.length) {
      const names = tools.map((t) => (t && t.function && t.function.name) || "?").join(", ");
      out.push(lazy(`tools offered: ${names}`, () => [pre(JSON.stringify(tools, null, 2))]));
    } else if (r.tools_ref && tools === undefined) {
      out.push(el("p", "note", "tool specs pruned (deleted by retention)"));
    }
    if (r.params && Object.keys(r.params).length) out.push(el("div", "dim", "params"), pre(JSON.stringify(r.params, null, 2)));
    return out;
  }

  function callRow(call, label) {
    const what = el("td", null, el("strong", null, call.model || "model"));
    for (const part of [call.purpose, call.finish_reason, call.ttft != null && "ttft " + secs(call.ttft),
      call.retries && `${call.retries} retries`, call.cached && "cache hit", call.sent_model && "answered by fallback " + call.sent_model]) {
      if (part) what.append(" · ", part);
    }
    what.append(el("div", "dim", call.id));
    if (call.error) what.append(pre(call.error, "error-text"));
    for (const note of call.notes || []) what.append(el("div", "note", note));
    const r = call.request || {};
    what.append(lazy(`request: ${num(r.message_count)} messages, ${num(r.tool_count)} tools, ~${num(r.tokens_estimate)} tokens`,
      () => request(call)));
    if (call.response) what.append(lazy("response", () => [message(call.response.message)]));
    const u = call.usage;
    return el("tr", "model-call", el("td", "num", label), what, el("td", "num", usageText(u)),
      el("td", "num", u ? money(u.cost) : "–"), el("td", "num", secs(call.latency)));
  }

  function toolRow(t, label) {
    const what = el("td", null, el("span", "call-name", "→ " + t.name), " ", el("span", "dim", t.call_id), pre(pretty(t.arguments)));
    if (t.content === null || t.content === undefined) what.append(el("p", "note", t.started ? "no result logged" : "not run"));
    else what.append(el("div", "dim", t.is_error ? "error" : "result"), pre(t.content, t.is_error ? "error-text" : ""));
    if (t.approval) what.append(el("div", "dim", t.approval));
    return el("tr", "tool-call", el("td", "num", label), what, el("td"), el("td"), el("td", "num", secs(t.latency)));
  }

  const noteRow = (text) => el("tr", "notice", el("td"), el("td", "note", "! " + text), el("td"), el("td"), el("td"));

  function runTrace(run) {
    const head = el("p", "run-head", el("strong", null, "run " + run.run_id), " ", el("span", "badge " +
      (run.status === "completed" ? "pass" : "fail"), run.status), " · ", run.model || "?");
    if (run.parent) head.append(el("span", "dim", ` (for ${run.parent})`));
    if (run.resumed) head.append(` · resumed ${run.resumed}×`);
    const table = el("table", "trace");
    table.append(el("thead", null, el("tr", null, ...["Step", "Model call / tool call", "Tokens in/out/cached", "Cost", "Time"]
      .map((h) => { const th = el("th", null, h); th.scope = "col"; return th; }))));
    const body = el("tbody");
    const steps = [...new Set([...run.model_calls.map((c) => c.step), ...run.tool_calls.map((t) => t.step),
      ...run.notices.map((n) => n.step), ...run.compactions.map((c) => c.step)])].sort((a, b) => a - b);
    for (const step of steps) {
      let label = step ? String(step) : "";
      for (const c of run.compactions.filter((x) => x.step === step)) {
        body.append(noteRow(`compacted ${num(c.tokens_before)} → ${num(c.tokens_after)} tokens`));
      }
      for (const c of run.model_calls.filter((x) => x.step === step)) { body.append(callRow(c, label)); label = ""; }
      for (const t of run.tool_calls.filter((x) => x.step === step)) { body.append(toolRow(t, label)); label = ""; }
      for (const n of run.notices.filter((x) => x.step === step)) body.append(noteRow(n.text));
    }
    table.append(body);
    const u = run.usage || {};
    const end = el("p", null, el("strong", null, run.status), ` · ${count(run.steps, "step")} · ` +
      `${count(run.model_calls.length, "model call")} · ${count(run.tool_calls.length, "tool call")} · ` +
      `${money(u.cost, u.known_cost)} · ${secs(run.wall_time)}`,
    el("br"), el("span", "dim", `tokens ${num(u.input_tokens)} in / ${num(u.output_tokens)} out / ${num(u.cached_tokens)} cached`));
    if (run.error && run.status !== "completed") end.append(pre(run.error, "error-text"));
    return [head, el("div", "dim", "task"), pre(run.task), el("div", "scroll", table), end];
  }

  function trace(sessions) {
    const out = [];
    sessions.forEach((s, i) => {
      if (sessions.length > 1) out.push(el("h4", null, `Task ${i + 1} · session ${s.name}`));
      if (s.note) out.push(el("p", "note", s.note));
      for (const run of s.runs || []) out.push(...runTrace(run));
    });
    return out;
  }

  // ------------------------------------------------------------------------------------------- a sample

  function commands(r) {
    const ws = D.folder ? D.folder.replace(/\/$/, "") + "/" + r.workspace : r.workspace;
    const names = r.sessions && r.sessions.length ? r.sessions : [r.sample];
    return el("pre", "cmds", names.flatMap((s) => [`shou show ${quote(s)} -w ${quote(ws)}`,
      `shou trace ${quote(s)} -w ${quote(ws)}`]).join("\n"));
  }

  function checks(r) {
    if (!r.checks || !r.checks.length) return [];
    const table = el("table", "checks", el("thead", null, el("tr", null, ...["Check", "Result", "Score", "Detail"]
      .map((h) => { const th = el("th", null, h); th.scope = "col"; return th; }))));
    const body = el("tbody");
    for (const c of r.checks) {
      body.append(el("tr", null, el("td", null, c.check), el("td", null, el("span", "badge " + (c.passed ? "pass" : "fail"),
        c.passed ? "passed" : "failed")), el("td", null, c.score), el("td", null, c.detail ? pre(c.detail) : "")));
    }
    table.append(body);
    return [el("h4", null, "Checks"), el("div", "scroll", table)];
  }

  function sampleBody(r) {
    const t = r.tokens || {};
    const out = [facts([["sample", r.sample], ["status", r.status], ["score", r.score], ["steps", r.steps],
      ["tokens", `${num(t.total)} (${num(t.input)} in, ${num(t.output)} out)`],
      ["cost", money(r.cost) + (r.judge_cost ? ` (judges ${money(r.judge_cost)})` : "")],
      ["latency", secs(r.latency)], ["tags", (r.tags || []).join(", ")]])];
    if (Array.isArray(r.answers)) r.answers.forEach((a, i) => out.push(el("h4", null, `Answer to task ${i + 1}`), pre(a)));
    else out.push(el("h4", null, "Answer"), r.answer ? pre(r.answer, "answer") : el("p", "note", "no answer"));
    if (r.error) out.push(el("h4", null, "Error"), pre(r.error, "error-text"));
    out.push(...checks(r));
    const files = r.wrote || [];
    out.push(el("h4", null, "Files written"), files.length ? el("ul", "files", ...files.map((f) => el("li", null, el("code", null, f))))
      : el("p", "note", "none"));
    if (r.wrote_more) out.push(el("p", "note", `and ${num(r.wrote_more)} more`));
    if (!r.detail) {
      out.push(el("p", "note", `Transcript and trace not in this page: ${r.left_out}. These commands show them:`), commands(r));
      return out;
    }
    const data = block(r.detail);
    if (data.note) {
      out.push(el("p", "note unreadable", `No transcript or trace: ${data.note}.`), commands(r));
      return out;
    }
    out.push(lazy("Transcript", () => transcript(data.sessions), "part transcript"),
      lazy("Trace", () => trace(data.sessions), "part trace"));
    return out;
  }

  function sample(r) {
    const t = r.tokens || {};
    const d = lazy([el("span", "badge " + r.outcome, r.outcome), ` ${r.model} · epoch ${r.epoch} · ${secs(r.latency)} · ` +
      `${num(t.total)} tokens · ${money(r.cost)}`], () => sampleBody(r), "sample");
    d.dataset.sample = r.sample;
    return d;
  }

  // ------------------------------------------------------------------------------------------- the case list

  const order = new Map(D.models.map((m, i) => [m, i]));
  const cases = [];
  const byId = new Map();
  for (const r of D.rows) {
    let c = byId.get(r.case);
    if (!c) { c = { id: r.case, n: cases.length, rows: [] }; byId.set(r.case, c); cases.push(c); }
    c.rows.push(r);
  }
  for (const c of cases) c.rows.sort((a, b) => (order.get(a.model) ?? 1e9) - (order.get(b.model) ?? 1e9) || a.epoch - b.epoch);

  const hay = (r) => (r._hay ??= [r.case, r.sample, r.model, r.status, r.answer, ...(r.answers || []), r.error,
    ...(r.tags || []), ...(r.wrote || []), ...(r.checks || []).map((c) => `${c.check} ${c.detail}`)].join("\n").toLowerCase());

  const $ = (id) => document.getElementById(id);
  const failedOnly = $("failed-only"), modelFilter = $("model-filter"), search = $("search"), more = $("more");
  const opened = new Set();
  let limit = PAGE;

  function matching(c, model, failed, q) {
    const rows = model ? c.rows.filter((r) => r.model === model) : c.rows;
    if (!rows.length) return null;
    if (failed && rows.every((r) => r.outcome === "pass")) return null;
    if (q && !c.id.toLowerCase().includes(q) && !rows.some((r) => hay(r).includes(q))) return null;
    return rows;
  }

  function caseRows(c, rows, models) {
    const id = "case-" + c.n;
    const button = el("button", "case", c.id);
    button.type = "button";
    button.setAttribute("aria-controls", id);
    const th = el("th", null, button);
    th.scope = "row";
    const tr = el("tr", "case", th);
    tr.dataset.case = c.id;
    for (const m of models) {
      const mine = rows.filter((r) => r.model === m);
      const td = el("td", "marks");
      if (!mine.length) td.append("–");
      else {
        td.append(el("span", "dim", `${mine.filter((r) => r.outcome === "pass").length}/${mine.length} `));
        for (const r of mine) td.append(el("span", "mark " + r.outcome, MARK[r.outcome] || "?",
          el("span", "sr", ` epoch ${r.epoch} ${r.outcome}`)));
      }
      tr.append(td);
    }
    const cell = el("td");
    cell.colSpan = models.length + 1;
    const detail = el("tr", "detail", cell);
    detail.id = id;
    const show = (open) => {
      button.setAttribute("aria-expanded", String(open));
      detail.hidden = !open;
      if (open && !cell.firstChild) cell.append(el("div", "detail-body", ...rows.map(sample)));
    };
    button.addEventListener("click", () => {
      const open = button.getAttribute("aria-expanded") !== "true";
      if (open) opened.add(c.id); else opened.delete(c.id);
      show(open);
    });
    show(opened.has(c.id));
    return [tr, detail];
  }

  function render() {
    const model = modelFilter.value, q = search.value.trim().toLowerCase();
    const models = model ? [model] : D.models;
    const head = el("tr", null, ...["Case", ...models].map((h) => { const th = el("th", null, h); th.scope = "col"; return th; }));
    $("cases").tHead.replaceChildren(head);
    const hits = [];
    for (const c of cases) {
      const rows = matching(c, model, failedOnly.checked, q);
      if (rows) hits.push([c, rows]);
    }
    const body = $("cases").tBodies[0];
    body.replaceChildren(...hits.slice(0, limit).flatMap(([c, rows]) => caseRows(c, rows, models)));
    const total = D.rows.length ? `${num(hits.length)} of ${num(cases.length)} cases` : "no samples";
    $("case-count").textContent = total + (hits.length > limit ? `, the first ${num(limit)} shown` : "");
    more.hidden = hits.length <= limit;
  }

  const refilter = () => { limit = PAGE; render(); };
  failedOnly.addEventListener("change", refilter);
  modelFilter.addEventListener("change", refilter);
  search.addEventListener("input", refilter);
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  more.addEventListener("click", () => { limit += PAGE; render(); });
  render();
  document.documentElement.dataset.ready = "1"; // for tests: the case list is laid out
})();
