// Calls waiting for a person: a card with the tool, its full arguments and the rule that asked, and
// Approve / Deny. The same card shows in the chat (from the run's events) and in the sidebar's list of every
// pending approval (GET /v1/approvals).

import { $, $$, el, enc, button, pretty } from './util.js';
import { getJSON, AuthError } from './api.js';

let report = () => {};
let afterDecision = () => {};

/** `onError(text)` shows a failure; `onDecided()` runs after a decision went through. */
export function setupApprovals(onError, onDecided) { report = onError; afterDecision = onDecided; }

/** The card for call `callId` of `name` with `args`; `why` is the rule that asked, `rule` what "always" adds. */
export function approvalCard({ callId, name, args, why, rule, runId }) {
  const card = el('div', 'approval');
  card.dataset.callId = callId || '';
  card.setAttribute('role', 'group');
  card.setAttribute('aria-label', `Approval needed: ${name || '?'}`);
  const head = el('div', 'tool-head');
  head.append(el('span', 'approval-label', 'Approval needed:'), el('span', 'tool-name', name || '?'));
  card.append(head);
  if (why) card.append(el('div', 'why', why));
  if (rule) card.append(el('div', 'rule', 'rule: ' + rule));
  const pre = el('pre', 'tool-args', pretty(args));
  pre.tabIndex = 0;
  card.append(pre);
  const actions = el('div', 'actions');
  actions.append(button('Approve', 'approve', () => decide(callId, true, actions, runId)),
                 button('Deny', 'deny', () => decide(callId, false, actions, runId)));
  card.append(actions);
  return card;
}

async function decide(callId, allow, actions, runId) {
  $$('button', actions).forEach(b => { b.disabled = true; });
  try {
    // Under its run: providers reuse call ids, and another run's call with the same id must not be decided.
    const path = runId ? 'v1/runs/' + enc(runId) + '/approvals/' + enc(callId) : 'v1/approvals/' + enc(callId);
    await getJSON(path, { method: 'POST', body: { allow } });
    markDecided(callId, allow, 'you');
    afterDecision();
  } catch (e) {
    $$('button', actions).forEach(b => { b.disabled = false; });
    if (!(e instanceof AuthError)) report(`Could not decide: ${e.message}`);
  }
}

/** Every card of call `callId` on the page shows the decision instead of its buttons. */
export function markDecided(callId, allow, by) {
  for (const card of $$('.approval')) {
    if (card.dataset.callId !== callId) continue;
    const text = el('span', 'decided ' + (allow ? 'allowed' : 'denied'), (allow ? 'Approved' : 'Denied') + (by ? ' by ' + by : ''));
    card.querySelector('.actions').replaceChildren(text);
  }
}

/** The sidebar's list: every call of the user's runs waiting for a decision. */
export async function loadApprovals(openSession) {
  const data = await getJSON('v1/approvals');
  const box = $('#approvals');
  const items = (data && data.approvals) || [];
  box.replaceChildren();
  if (!items.length) box.append(el('p', 'empty', 'none'));
  for (const a of items) {
    const card = approvalCard({ callId: a.call_id, name: a.tool, args: a.arguments, why: a.why, rule: a.rule,
                                runId: a.run_id });
    const open = button('session ' + (a.session || '?'), 'link', () => openSession(a.session));
    card.insertBefore(open, card.querySelector('.actions'));
    box.append(card);
  }
  $('#approvals-count').textContent = items.length ? String(items.length) : '';
  return items.length;
}
