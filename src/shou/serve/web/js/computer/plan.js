// The Plan tab: the run's checklist with each step's state, each step's sub-run nested under it (collapsible,
// with the calls it made and its answer), and sub-runs that carried out no step (delegated work) after it.

import { el, plural } from '../util.js';
import { planList } from '../plan.js';

function subRun(run, sub) {
  const box = el('details', 'subrun');
  box.open = sub.status === 'running';
  const calls = [...run.calls.values()].filter(c => c.runId === sub.id);
  box.append(el('summary', '', `sub-run: ${sub.task || sub.id} · ${sub.status} · ${plural(calls.length, 'call')}`));
  const ul = el('ul', 'sub-calls');
  for (const c of calls) {
    const state = !c.result ? 'running' : c.result.isError ? 'error' : 'done';
    ul.append(el('li', 'sub-call ' + state, `${c.name} — ${state}`));
  }
  if (calls.length) box.append(ul);
  if (sub.answer) box.append(el('div', 'sub-answer', sub.answer));
  if (sub.error) box.append(el('div', 'note bad', sub.error));
  return box;
}

export function render(run, panel) {
  panel.replaceChildren();
  if (!run) { panel.append(el('p', 'empty', 'No run selected.')); return; }
  const d = run.plans.get(run.id);
  const used = new Set();
  if (d) {
    for (const s of d.steps || []) if (s.run_id) used.add(s.run_id);
    panel.append(planList(d, run.subs, sub => subRun(run, sub)));
  }
  const others = [...run.subs.values()].filter(s => !used.has(s.id));
  if (others.length) {
    panel.append(el('h3', 'pane-h', 'Sub-runs'));
    for (const s of others) panel.append(subRun(run, s));
  }
  if (!d && !others.length) panel.append(el('p', 'empty', 'This run made no plan and started no sub-run.'));
}
