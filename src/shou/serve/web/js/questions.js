// A question the agent asks the person (ask_user): the question, its choices as buttons, and a box to write
// any other answer. The card comes from the run's events (input_requested), so a page opened after a server
// restart shows it again; input_answered replaces its controls with the answer.

import { $, $$, el, enc, button } from './util.js';
import { getJSON, AuthError } from './api.js';

let report = () => {};
let afterAnswer = () => {};

/** `onError(text)` shows a failure; `onAnswered()` runs after an answer went through. */
export function setupQuestions(onError, onAnswered) { report = onError; afterAnswer = onAnswered; }

/** The card for question `question` (call `callId` of run `runId`), with `choices` offered as buttons. */
export function questionCard({ callId, question, choices, runId }) {
  const card = el('div', 'question');
  card.dataset.callId = callId || '';
  card.setAttribute('role', 'group');
  card.setAttribute('aria-label', 'The agent asks');
  const head = el('div', 'tool-head');
  head.append(el('span', 'question-label', 'The agent asks:'));
  card.append(head, el('div', 'question-text', question || ''));
  const actions = el('form', 'actions');
  for (const choice of choices || []) {
    actions.append(button(choice, 'choice', () => send(callId, runId, choice, actions)));
  }
  const input = el('input', 'answer-input');
  input.type = 'text';
  input.placeholder = choices && choices.length ? 'or write another answer…' : 'your answer…';
  input.setAttribute('aria-label', 'Your answer');
  const go = button('Answer', 'primary answer-send');
  go.type = 'submit';
  actions.append(input, go);
  actions.addEventListener('submit', ev => {
    ev.preventDefault();
    if (input.value.trim()) send(callId, runId, input.value, actions);
  });
  card.append(actions);
  return card;
}

async function send(callId, runId, text, actions) {
  const controls = [...actions.querySelectorAll('button, input')];
  controls.forEach(c => { c.disabled = true; });
  try {
    await getJSON('v1/runs/' + enc(runId) + '/answer', { method: 'POST', body: { text, call_id: callId } });
    markAnswered(callId, text, 'you');
    afterAnswer();
  } catch (e) {
    controls.forEach(c => { c.disabled = false; });
    if (!(e instanceof AuthError)) report(`Could not answer: ${e.message}`);
  }
}

/** The sidebar's list: every question of the user's runs waiting for an answer (GET /v1/questions). */
export async function loadQuestions(openSession) {
  const data = await getJSON('v1/questions');
  const box = $('#questions');
  const items = (data && data.questions) || [];
  box.replaceChildren();
  if (!items.length) box.append(el('p', 'empty', 'none'));
  for (const q of items) {
    const card = questionCard({ callId: q.call_id, question: q.question, choices: q.choices, runId: q.run_id });
    const open = button('session ' + (q.session || '?'), 'link', () => openSession(q.session));
    card.insertBefore(open, card.querySelector('.actions'));
    box.append(card);
  }
  $('#questions-count').textContent = items.length ? String(items.length) : '';
  return items.length;
}

/** Every card of question `callId` on the page shows the answer instead of its controls. */
export function markAnswered(callId, text, by) {
  for (const card of $$('.question')) {
    if (card.dataset.callId !== callId) continue;
    const shown = el('div', 'answered', 'Answered' + (by ? ' by ' + by : '') + ': ' + text);
    card.querySelector('.actions').replaceWith(shown);
  }
}
