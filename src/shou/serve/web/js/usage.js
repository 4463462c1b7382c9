// The usage view: what `shou usage` reports, for the user's own sessions (GET /v1/usage): requests, tokens
// and cost by day and model over the last N days, and the total. Costs are in the configured currency; an
// unknown cost (a model without a price) is "unknown", and an estimated one is marked "≈".

import { $, el, count } from './util.js';
import { getJSON, AuthError } from './api.js';
import { money } from './config.js';

const COLUMNS = ['Day', 'Model', 'Requests', 'Input tokens', 'Output tokens', 'Cached tokens', 'Cost'];

function cells(row, tag) {
  const cost = money(row.cost) + (row.estimated && typeof row.cost === 'number' ? ' (≈)' : '');
  return [row.day || '', row.model || '', count(row.requests), count(row.input_tokens), count(row.output_tokens),
          count(row.cached_tokens), cost].map((v, i) => el(tag, i > 1 ? 'num' : '', v));
}

function table(data) {
  const t = el('table', 'usage-table');
  t.append(el('caption', '', `Your usage over the last ${data.days || ''} days, by day and model`));
  const head = el('tr');
  for (const c of COLUMNS) { const th = el('th', '', c); th.scope = 'col'; head.append(th); }
  t.append(el('thead'));
  t.tHead.append(head);
  const body = el('tbody');
  for (const r of data.rows || []) { const tr = el('tr'); tr.append(...cells(r, 'td')); body.append(tr); }
  t.append(body);
  const total = el('tr', 'total');
  total.append(...cells(Object.assign({}, data.total || {}, { day: 'Total', model: '' }), 'td'));
  const foot = el('tfoot');
  foot.append(total);
  t.append(foot);
  return t;
}

/** Load and draw the usage for the chosen number of days. */
export async function loadUsage() {
  const box = $('#usage-body');
  const days = $('#usage-days').value || '30';
  box.replaceChildren(el('p', 'note', 'loading…'));
  let data;
  try { data = await getJSON('v1/usage?days=' + encodeURIComponent(days)); } catch (e) {
    if (!(e instanceof AuthError)) box.replaceChildren(el('p', 'note bad', 'Could not load the usage: ' + e.message));
    return;
  }
  if (!(data.rows || []).length) { box.replaceChildren(el('p', 'empty', 'No model calls in this period.')); return; }
  const wrap = el('div', 'table-scroll');
  wrap.tabIndex = 0;
  wrap.append(table(data));
  box.replaceChildren(wrap);
}

export function setupUsage() {
  $('#usage-days').addEventListener('change', loadUsage);
  $('#usage-refresh').addEventListener('click', loadUsage);
}
