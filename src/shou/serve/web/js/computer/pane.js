// The computer pane beside the chat: what the followed run did to the workspace (Files), in the browser
// (Browser), in the shell (Terminal), and its plan with its sub-runs (Plan). It follows one run (the latest,
// or the one whose Computer button was pressed) and redraws the open tab as that run's events arrive.

import { $, $$ } from '../util.js';
import * as files from './files.js';
import * as browser from './browser.js';
import * as terminal from './terminal.js';
import * as plan from './plan.js';

const TABS = { files, browser, terminal, plan };
let run = null;
let stop = () => {};
let current = 'files';
let timer = null;

/** Follow `r` (a Run, or null for none). */
export function follow(r) {
  if (r === run) return;
  stop();
  run = r;
  stop = r ? r.on(what => changed(what)) : () => {};
  $('#computer-run').textContent = r ? r.task.split('\n')[0].slice(0, 120) : 'no run selected';
  for (const t of Object.values(TABS)) if (t.reset) t.reset();
  files.runChanged(r, 'status');
  draw();
}

function changed(what) {
  files.runChanged(run, what);  // the tree is reloaded when the run may have written files
  if (!timer) timer = setTimeout(() => { timer = null; draw(); }, 60);
}

function draw() {
  TABS[current].render(run, $('#tab-' + current));
}

/** Open tab `name`; `arg` is passed on (a screenshot to show). */
export function showTab(name, arg) {
  if (!TABS[name]) return;
  current = name;
  for (const b of $$('#computer [role="tab"]')) {
    const on = b.dataset.tab === name;
    b.setAttribute('aria-selected', String(on));
    b.tabIndex = on ? 0 : -1;
  }
  for (const p of $$('#computer [role="tabpanel"]')) p.hidden = p.id !== 'tab-' + name;
  if (TABS[name].select && arg !== undefined) TABS[name].select(arg);
  draw();
}

/** On a narrow screen the pane takes the place of the chat. */
export function reveal() { document.body.dataset.panel = 'computer'; }

export function setupPane() {
  const tabs = $$('#computer [role="tab"]');
  tabs.forEach((b, i) => {
    b.addEventListener('click', () => showTab(b.dataset.tab));
    b.addEventListener('keydown', ev => {  // arrow keys move along the tabs (the ARIA tabs pattern)
      const step = { ArrowRight: 1, ArrowLeft: -1 }[ev.key];
      if (!step) return;
      const next = tabs[(i + step + tabs.length) % tabs.length];
      next.focus();
      showTab(next.dataset.tab);
    });
  });
  files.setup();
  browser.setup();
  showTab('files');
}
