// A run's trace (GET /v1/runs/{id}/trace): a timeline of its model and tool calls with their latencies, then
// each model call with the full request it sent (messages, tools, parameters) and what came back.

import { el, enc, secs, num, count } from './util.js';
import { getJSON } from './api.js';
import { money } from './config.js';

/** Fill `box` with run `runId`'s trace. */
export async function loadTrace(runId, box) {
  box.replaceChildren(el('p', 'note', 'loading…'));
  let data;
  try { data = await getJSON('v1/runs/' + enc(runId) + '/trace'); } catch (e) {
    box.replaceChildren(el('p', 'note bad', 'no trace: ' + e.message));
    return;
  }
  const runs = Array.isArray(data) ? data : (data && Array.isArray(data.runs) ? data.runs : [data || {}]);
  box.replaceChildren();
  for (const run of runs) {
    drawTimeline(run || {}, box);
    drawCalls(run || {}, box);
  }
  if (!box.children.length) box.append(el('p', 'note', 'nothing recorded'));
}

/** The model and tool calls of each step, laid out one after the other on the run's time axis. */
function timelineItems(run) {
  const calls = Array.isArray(run.model_calls) ? run.model_calls : [];
  const tools = Array.isArray(run.tool_calls) ? run.tool_calls : [];
  const steps = [...new Set([...calls, ...tools].map(x => num(x && x.step)))].sort((a, b) => a - b);
  const t0 = num(run.started) || Math.min(...calls.map(c => num(c.at)).filter(Boolean), Infinity);
  const items = [];
  let cursor = 0;
  for (const step of steps) {
    for (const c of calls.filter(x => num(x && x.step) === step)) {
      const start = isFinite(t0) && num(c.at) ? Math.max(num(c.at) - t0, cursor) : cursor;
      const dur = num(c.latency);
      items.push({ kind: 'model', label: (c.model || 'model') + (c.purpose ? ' · ' + c.purpose : ''), start, dur,
                   error: !!c.error, title: `step ${step} · ${c.id || ''}` });
      cursor = start + dur;
    }
    for (const t of tools.filter(x => num(x && x.step) === step)) {
      const dur = num(t.latency);
      items.push({ kind: 'tool', label: t.name || 'tool', start: cursor, dur, error: !!t.is_error,
                   title: `step ${step} · ${t.call_id || ''}` });
      cursor += dur;
    }
  }
  return items;
}

function drawTimeline(run, box) {
  const items = timelineItems(run);
  const total = Math.max(num(run.wall_time), ...items.map(i => i.start + i.dur), 0.001);
  box.append(el('div', 'trace-run', `run ${run.run_id || '?'} · ${run.status || '?'} · ${secs(total)}` +
                                    (run.parent ? ` · for ${run.parent}` : '')));
  for (const it of items) {
    const row = el('div', 'trace-row');
    row.title = it.title;
    const track = el('div', 'track');
    const bar = el('div', 'bar ' + it.kind + (it.error ? ' error' : ''));
    bar.style.left = (100 * it.start / total).toFixed(2) + '%';
    bar.style.width = (100 * it.dur / total).toFixed(2) + '%';
    track.append(bar);
    row.append(el('span', 'lbl', it.label), track, el('span', 'dur', secs(it.dur)));
    box.append(row);
  }
}

/** Each model call, collapsed: step, model, latency, tokens, cost; open: its full request and response. */
function drawCalls(run, box) {
  const calls = Array.isArray(run.model_calls) ? run.model_calls : [];
  if (!calls.length) return;
  const list = el('div', 'trace-calls');
  list.append(el('h4', '', 'Model calls'));
  for (const c of calls) {
    const d = el('details', 'trace-call');
    const u = c.usage || {};
    const summary = `step ${num(c.step)} · ${c.model || 'model'}${c.purpose ? ' · ' + c.purpose : ''} · ` +
      `${secs(num(c.latency))} · ${count(u.input_tokens)} in / ${count(u.output_tokens)} out · ${money(u.cost)}` +
      (c.error ? ' · error' : '');
    d.append(el('summary', '', summary));
    d.addEventListener('toggle', () => { if (d.open && d.children.length === 1) callDetails(c, d); });
    list.append(d);
  }
  box.append(list);
}

/** What a model call sent and got, filled in when it is first opened (requests are large). */
function callDetails(c, d) {
  const req = c.request || {};
  d.append(el('div', 'trace-sub', req.recorded === false ? 'request (not recorded)' :
    `request: ${count(req.message_count)} messages, ${count(req.tool_count)} tools`));
  d.append(scrolling(el('pre', 'trace-json', JSON.stringify({ messages: req.messages, tools: req.tools,
                                                            params: req.params }, null, 2))));
  if (c.response) {
    d.append(el('div', 'trace-sub', 'response'));
    d.append(scrolling(el('pre', 'trace-json', JSON.stringify(c.response, null, 2))));
  }
  if (c.error) d.append(el('div', 'note bad', String(c.error)));
}

/** `node`, which may scroll, reachable from the keyboard. */
function scrolling(node) { node.tabIndex = 0; return node; }
