// The chat: a session's runs one under the other. A new task starts a run and follows its event stream; a
// session reopened replays each of its runs' stored streams through the same RunView, then follows the one
// still running. Also the composer: Enter sends, Shift+Enter is a new line, Up recalls the last task.

import { $, el, enc, when } from './util.js';
import { getJSON, AuthError } from './api.js';
import { followRun } from './sse.js';
import { RunView } from './runview.js';
import { ACTIVE } from './run.js';
import { loadSessions, markSession } from './sessions.js';
import { loadApprovals } from './approvals.js';
import { loadQuestions } from './questions.js';
import * as computer from './computer/pane.js';
import * as attachments from './attachments.js';

const chat = () => $('#chat');
const state = { session: null, views: [], ctrl: new AbortController(), live: null, selected: null, lastTask: '' };

// The chat sticks to its end while the person has not scrolled up from it.
let stick = true;
const atEnd = c => c.scrollHeight - c.scrollTop - c.clientHeight < 80;

/** Run `fn` (which adds to the chat), keeping the chat scrolled to the end if it was there. */
export function scroll(fn) {
  const c = chat();
  fn();
  if (stick) c.scrollTop = c.scrollHeight;
}

export function note(text, bad) { scroll(() => chat().append(el('p', bad ? 'note bad' : 'note', text))); }
export function setStatus(text) { $('#run-status').textContent = text || ''; }

const handlers = {
  select: v => { selectRun(v); computer.reveal(); },
  stop: v => stopRun(v),
  image: (v, key) => { selectRun(v); computer.showTab('browser', key); computer.reveal(); },
  approvals: () => refresh(),
  scroll,
};

export function refresh() {
  return Promise.all([loadSessions(openSession, state.session), loadApprovals(openSession), loadQuestions(openSession)])
    .catch(e => { if (!(e instanceof AuthError)) note(e.message, true); });
}

function addView(info) {
  const v = new RunView(info, handlers);
  state.views.push(v);
  scroll(() => chat().append(v.section));
  return v;
}

/** The computer pane follows `view`'s run. */
function selectRun(view) {
  state.selected = view;
  for (const v of state.views) v.section.classList.toggle('selected', v === view);
  computer.follow(view ? view.run : null);
}

function setLive(view) {
  state.live = view;
  $('#send').disabled = !!view;
  $('#cancel').hidden = !view;
  $('#cancel').disabled = false;
  setStatus(view ? 'running' : '');
}

/** Feed run `view`'s events (stored, then live) into it until the run ends. */
async function play(view) {
  const ctrl = state.ctrl;
  if (ACTIVE.has(view.run.status)) setLive(view);
  const handle = d => {
    const over = view.handle(d);
    const waits = { waiting_approval: 'waiting for approval', waiting_input: 'waiting for your answer' };
    if (state.live === view) setStatus(waits[view.run.status] || 'running');
    return over;
  };
  await followRun(view.run.id, handle, ctrl.signal, (msg, bad) => (bad ? note(msg, true) : setStatus(msg)));
  for (const b of view.section.querySelectorAll('.bubble.streaming')) b.classList.remove('streaming');
  if (state.live === view) { setLive(null); refresh(); }
}

function setSession(name, title) {
  state.session = name;
  $('#session-label').textContent = title || name || 'New chat';
  markSession(name);
}

/** Forget what is shown: streams stop, the chat empties. */
export function reset() {
  state.ctrl.abort();
  state.ctrl = new AbortController();
  for (const v of state.views) v.dispose();
  state.views = [];
  setLive(null);
  selectRun(null);
  chat().replaceChildren();
  stick = true;
}

export function newChat() { reset(); setSession(null); $('#task').focus(); }

/** Show session `name`: each run replayed from its stored events, in the order they ran. */
export async function openSession(name, title) {
  if (!name) return;
  reset();
  setSession(name, title);
  const ctrl = state.ctrl;
  let data;
  try { data = await getJSON('v1/sessions/' + enc(name)); } catch (e) {
    if (!(e instanceof AuthError)) note(e.message, true);
    return;
  }
  if (ctrl.signal.aborted) return;
  const runs = (data.runs || []).slice().sort((a, b) => when(a.created) - when(b.created));
  const views = runs.map(addView);
  if (views.length) { selectRun(views[views.length - 1]); state.lastTask = views[views.length - 1].run.task; }
  for (const v of views) {
    if (ctrl.signal.aborted) return;
    await play(v);
  }
}

async function submit(ev) {
  ev.preventDefault();
  const box = $('#task');
  const typed = box.value.trim();
  if (!typed || state.live) return;
  const task = typed + attachments.mention();
  const body = { task };
  if (state.session) body.session = state.session;
  if ($('#opt-plan').checked) body.options = { plan: true };
  $('#send').disabled = true;
  let r;
  try { r = await getJSON('v1/runs', { method: 'POST', body }); } catch (e) {
    $('#send').disabled = false;
    if (!(e instanceof AuthError)) note(`Could not start the run: ${e.message}`, true);
    return;
  }
  box.value = '';
  attachments.clear();
  state.lastTask = typed;
  if (r.session !== state.session) setSession(r.session, typed.split('\n')[0].slice(0, 80));
  const v = addView(Object.assign({ task }, r));
  selectRun(v);
  loadSessions(openSession, state.session).catch(() => {});
  play(v);
}

/** Ask the server to stop `view`'s run (or the live one). */
export async function stopRun(view) {
  view = view || state.live;
  if (!view || view.run.over) return;
  view.head.stopping();
  $('#cancel').disabled = true;
  try {
    await getJSON('v1/runs/' + enc(view.run.id) + '/cancel', { method: 'POST' });
    setStatus('stopping…');
  } catch (e) {
    $('#cancel').disabled = false;
    if (!(e instanceof AuthError)) note(`Could not stop: ${e.message}`, true);
  }
}

export const isLive = () => !!state.live;

export function setupChat() {
  const c = chat();
  c.addEventListener('scroll', () => { stick = atEnd(c); }, { passive: true });
  c.addEventListener('load', () => { if (stick) c.scrollTop = c.scrollHeight; }, true);  // an image grew it
  $('#composer').addEventListener('submit', submit);
  $('#task').addEventListener('keydown', ev => {
    const box = ev.currentTarget;
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); $('#composer').requestSubmit(); }
    else if (ev.key === 'ArrowUp' && !box.value && state.lastTask) {
      ev.preventDefault();
      box.value = state.lastTask;
      box.setSelectionRange(box.value.length, box.value.length);
    }
  });
  $('#cancel').addEventListener('click', () => stopRun(null));
}
