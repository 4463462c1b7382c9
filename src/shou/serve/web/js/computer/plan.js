// The Plan tab: the run's checklist with each step's state, each step's sub-run nested under it (collapsible,
// with the calls it made and its answer), and sub-runs that carried out no step (delegated work) after it.

import { el, plural } from '../util.js';
import { planList } from '../plan.js';

/** A sub-run, collapsed to its state; open: its task, the calls it made, its answer. `named`: in a list of
 *  sub-runs (its task leads), not under the plan step it carried out (which says what it was for). */
function subRun(run, sub, named) {
  const box = el('details', 'subrun');
  box.open = sub.status === 'running';
  const calls = [...run.calls.values()].filter(c => c.runId === sub.id);
  const what = named ? (sub.task || sub.id).trim().split('\n')[0].slice(0, 100) : 'sub-run';
  box.append(el('summary', '', `${what} · ${sub.status} · ${plural(calls.length, 'call')}`));
  box.append(el('div', 'sub-task', sub.task));
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
    panel.append(planList(d, run.subs, sub => subRun(run, sub, false)));
  }
  const others = [...run.subs.values()].filter(s => !used.has(s.id));
  if (others.length) {
    panel.append(el('h3', 'pane-h', 'Sub-runs'));
    for (const s of others) panel.append(subRun(run, s, true));
  }
  if (!d && !others.length) panel.append(el('p', 'empty', 'This run made no plan and started no sub-run.'));
}
