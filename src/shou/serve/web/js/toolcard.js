// A tool call in the chat: its name, its arguments, then its result (text, an error, or a screenshot).
// All of it is untrusted (the model chose the arguments, the tool's output comes from anywhere): text only.

import { el, clip, pretty, secs, unfenced, imageSrc } from './util.js';
import { stripAnsi } from './ansi.js';

/** A card for a call that started: {id, name, argsText}. */
export function toolCard(call) {
  const card = el('div', 'tool-call' + (call.sub ? ' sub' : ''));
  card.dataset.callId = call.id;
  const head = el('div', 'tool-head');
  head.append(el('span', 'tool-name', call.name), el('span', 'tool-state', 'running…'));
  const args = el('pre', 'tool-args', pretty(call.argsText));
  args.tabIndex = 0;  // long arguments scroll: reachable from the keyboard
  card.append(head, args);
  return card;
}

/** Put a finished call's result into its card. */
export function showResult(card, call, onImage) {
  const r = call.result;
  let res = card.querySelector('.tool-result');
  if (!res) { res = card.appendChild(el('pre', 'tool-result')); res.tabIndex = 0; }
  res.textContent = stripAnsi(clip(call.name === 'browser' ? unfenced(r.content) : r.content, 4000));  // the Terminal tab has colours
  res.classList.toggle('error', r.isError);
  card.classList.toggle('error', r.isError);
  card.querySelector('.tool-state').textContent = (r.isError ? 'error · ' : '') + (r.latency ? secs(r.latency) : 'done');
  const src = imageSrc(r.image);
  if (src && !card.querySelector('.tool-shot')) {
    const b = el('button', 'tool-shot');
    b.type = 'button';
    b.title = 'Show in the Browser tab';
    const pic = el('img');
    pic.alt = 'screenshot' + (r.details && r.details.title ? ' of ' + r.details.title : '');
    pic.src = src;
    b.append(pic);
    b.addEventListener('click', () => onImage(call.key));
    card.append(b);
  }
}
