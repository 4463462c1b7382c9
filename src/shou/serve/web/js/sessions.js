// The sidebar's list of the user's sessions (GET /v1/sessions), newest first, the open one marked.

import { $, $$, el } from './util.js';
import { getJSON } from './api.js';

/** Fill the list; clicking a session calls `open(name)`. */
export async function loadSessions(open, current) {
  const data = await getJSON('v1/sessions');
  const list = $('#sessions');
  list.replaceChildren();
  const sessions = (data && data.sessions) || [];
  if (!sessions.length) list.append(el('li', 'empty', 'no sessions yet'));
  for (const s of sessions) {
    const b = el('button');
    b.type = 'button';
    b.dataset.session = s.name;
    if (s.name === current) { b.classList.add('active'); b.setAttribute('aria-current', 'true'); }
    b.append(el('span', 's-title', s.title || s.name));
    const at = s.updated ? new Date(typeof s.updated === 'number' ? s.updated * 1000 : s.updated) : null;
    const meta = [s.status, `${s.runs || 0} run${s.runs === 1 ? '' : 's'}`];
    if (at && !isNaN(at)) meta.push(at.toLocaleString());
    b.append(el('span', 's-meta', meta.filter(Boolean).join(' · ')));
    b.addEventListener('click', () => open(s.name, s.title));
    const li = el('li');
    li.append(b);
    list.append(li);
  }
}

/** Mark session `name` as the open one. */
export function markSession(name) {
  for (const b of $$('#sessions button')) {
    const on = b.dataset.session === name;
    b.classList.toggle('active', on);
    if (on) b.setAttribute('aria-current', 'true'); else b.removeAttribute('aria-current');
  }
}
