// A plan's checklist: each step with its state (pending, running, done, failed) and, when a sub-run carried
// it out, that run nested under it (collapsible). Used by the chat and the computer pane's Plan tab.

import { el } from './util.js';

const MARKS = { pending: '○', running: '◐', done: '✓', failed: '✗' };

/** The checklist of plan event `d`; `subs` (run id -> sub-run) nests each step's run when given. */
export function planList(d, subs, renderSub) {
  const box = el('div', 'plan-body');
  box.append(el('div', 'plan-head', `Plan${d.revision > 1 ? ' (revision ' + d.revision + ')' : ''}`));
  const ol = el('ol');
  for (const s of d.steps || []) {
    const status = MARKS[s.status] ? s.status : 'pending';
    const li = el('li', 'step ' + status);
    li.dataset.status = status;
    const line = el('div', 'step-line');
    const mark = el('span', 'mark', MARKS[status]);
    mark.setAttribute('aria-hidden', 'true');
    line.append(mark, el('span', 'txt', s.text || ''), el('span', 'st', status));
    li.append(line);
    if (s.result) li.append(el('div', 'step-result', s.result));
    const sub = subs && s.run_id ? subs.get(s.run_id) : null;
    if (sub && renderSub) li.append(renderSub(sub));
    ol.append(li);
  }
  box.append(ol);
  if (d.note) box.append(el('div', 'note', d.note));
  return box;
}
