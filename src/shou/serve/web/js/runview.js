// One run in the chat: the task, the run's header, then what it did as it happened (streamed text rendered
// as Markdown, tool calls, approvals, its plan, notices, sub-runs nested and collapsible) and its answer.
// A RunView is fed the run's events one by one, live or replayed from the store: the same code either way.

import { el, callParts, textOf, plural } from './util.js';
import { renderInto, sourceOf } from './markdown.js';
import { Run } from './run.js';
import { RunHead } from './runhead.js';
import { loadTrace } from './trace.js';
import { toolCard, showResult } from './toolcard.js';
import { approvalCard, markDecided } from './approvals.js';
import { planList } from './plan.js';

/** The first line of `text`, at most 100 characters. */
const shorten = text => {
  const line = text.trim().split('\n')[0];
  return line.length > 100 || text.trim().includes('\n') ? line.slice(0, 100) + '…' : line;
};

export class RunView {
  /** `info`: a run object of the API; `on`: {select(view), stop(view), image(view, key), approvals(), scroll} */
  constructor(info, on) {
    this.on = on;
    this.run = new Run(info);
    this.section = el('section', 'run');
    this.section.dataset.runId = this.run.id;
    this.section.setAttribute('aria-label', 'Run: ' + this.run.task.slice(0, 80));
    this.head = new RunHead(this.run, { trace: () => this.toggleTrace(), stop: () => on.stop(this),
                                        select: () => on.select(this) });
    this.traceBox = el('div', 'trace');
    this.traceBox.hidden = true;
    this.body = el('div', 'run-body');
    this.section.append(el('div', 'bubble user', this.run.task), this.head.el, this.traceBox, this.body);
    this.bubbles = new Map();  // "runId:step" -> the bubble of that model turn's text
    this.cards = new Map();    // call key -> its card
    this.plans = new Map();    // run id -> its plan box
    this.subBoxes = new Map(); // sub-run id -> its collapsible box
    this.pending = new Set();  // bubbles whose streamed text waits to be rendered
  }

  /** Where the events of run `runId` go: this run's body, or a sub-run's box. */
  place(runId) {
    const sub = this.subBoxes.get(runId);
    return sub ? sub.querySelector('.sub-body') : this.body;
  }

  add(node, runId) { this.on.scroll(() => this.place(runId).append(node)); return node; }
  note(text, runId, bad) { return this.add(el('p', bad ? 'note bad' : 'note', text), runId); }

  /** Fold and draw one event; true on the one that ends the run. */
  handle(d) {
    this.run.apply(d);
    const runId = String(d.run_id || this.run.id);
    const top = !d.parent && runId === this.run.id;
    switch (d.type) {
      case 'run_started': if (!top) this.subRun(d); break;
      case 'run_resumed': this.note('resumed after a restart', runId); break;
      case 'text_delta': this.streamText(d, runId); break;
      case 'model_response': this.turnText(d, runId); break;
      case 'tool_call_started': this.callStarted(d, runId); break;
      case 'tool_call_finished': this.callFinished(d, runId); break;
      case 'approval_requested': this.approval(d, runId); break;
      case 'approval_decided': markDecided(String(d.call_id || ''), !!d.allow, d.by); break;
      case 'plan': this.plan(d, runId); break;
      case 'notice': this.note(`${d.kind ? d.kind + ': ' : ''}${d.text || ''}`, runId, d.kind === 'model_error'); break;
      case 'review': this.note(d.approved ? 'review: approved' : `review: ${d.feedback || 'not approved'}`, runId); break;
      case 'handoff': this.note(`${d.source} hands over to ${d.target}${d.reason ? ': ' + d.reason : ''}`, runId); break;
      case 'guardrail_tripped': this.blocked(d, runId); break;
      case 'compacted': this.note('earlier messages were summarised to fit the context window', runId); break;
      case 'run_finished': return this.finished(d, top, runId);
      default: break;
    }
    return false;
  }

  subRun(d) {
    const box = el('details', 'subrun');
    box.open = true;
    const task = String(d.task || d.run_id);
    const summary = el('summary', '', 'sub-run: ' + shorten(task));
    summary.title = task;
    const state = el('span', 'sub-state', 'running');
    summary.append(' ', state);
    box.append(summary, el('div', 'sub-body'));
    this.add(box, String(d.parent || this.run.id));
    this.subBoxes.set(String(d.run_id), box);
  }

  bubble(key, runId) {
    let b = this.bubbles.get(key);
    if (!b) {
      b = this.add(el('div', 'bubble assistant'), runId);
      b.dataset.text = '';
      this.bubbles.set(key, b);
    }
    return b;
  }

  streamText(d, runId) {
    const b = this.bubble(runId + ':' + d.step, runId);
    b.classList.add('streaming');
    b.dataset.text += d.text || '';
    if (this.pending.has(b)) return;  // drawn when the wait ends: at most every 40 ms, not on every fragment
    this.on.scroll(() => renderInto(b, b.dataset.text));
    this.pending.add(b);
    setTimeout(() => {
      this.pending.delete(b);
      if (b.classList.contains('streaming') && sourceOf(b) !== b.dataset.text) {
        this.on.scroll(() => renderInto(b, b.dataset.text));
      }
    }, 40);
  }

  turnText(d, runId) {
    const key = runId + ':' + d.step;
    const text = textOf((d.message || {}).content);
    if (text.trim()) {
      const b = this.bubble(key, runId);
      b.dataset.text = text;
      b.classList.remove('streaming');
      this.on.scroll(() => renderInto(b, text));
    } else if (this.bubbles.has(key)) {
      this.bubbles.get(key).remove();
      this.bubbles.delete(key);
    }
  }

  /** A guardrail stopped the run: say why; an answer it blocked is taken off the page (the log keeps it). */
  blocked(d, runId) {
    const key = runId + ':' + d.step;
    if (d.kind === 'output' && this.bubbles.has(key)) {
      this.bubbles.get(key).remove();
      this.bubbles.delete(key);
    }
    this.note(`blocked by the ${d.kind || ''} guardrail ${d.name || ''}: ${d.reason || ''}`, runId, true);
  }

  callStarted(d, runId) {
    const key = runId + ':' + callParts(d.call).id;
    if (this.cards.has(key)) return;
    this.cards.set(key, this.add(toolCard(this.run.calls.get(key)), runId));
  }

  callFinished(d, runId) {
    const key = runId + ':' + String(d.call_id || '');
    const call = this.run.calls.get(key);
    if (!this.cards.has(key)) this.cards.set(key, this.add(toolCard(call), runId));
    this.on.scroll(() => showResult(this.cards.get(key), call, k => this.on.image(this, k)));
  }

  approval(d, runId) {
    const { id, name, args } = callParts(d.call);
    if ([...this.section.querySelectorAll('.approval')].some(c => c.dataset.callId === id)) return;
    this.add(approvalCard({ callId: id, name, args, why: d.why, rule: d.rule, runId: this.run.id }), runId);
    this.on.approvals();
  }

  plan(d, runId) {
    let box = this.plans.get(runId);
    if (!box) { box = this.add(el('div', 'plan'), runId); this.plans.set(runId, box); }
    box.replaceChildren(planList(d));
  }

  finished(d, top, runId) {
    const status = String(d.status || 'unknown');
    if (!top) {
      const box = this.subBoxes.get(runId);
      if (box) box.querySelector('.sub-state').textContent = status;
      return false;
    }
    if (status === 'waiting_approval') { this.on.approvals(); return false; }
    for (const b of this.section.querySelectorAll('.bubble.streaming')) b.classList.remove('streaming');
    const answer = String(d.answer || '');
    for (const [key, b] of this.bubbles) {  // the last bubble repeats the answer: the result shows it
      if (key.startsWith(this.run.id + ':') && answer && sourceOf(b).trim() === answer.trim()) b.remove();
    }
    const box = el('div', 'result' + (status === 'completed' ? '' : ' failed'));
    if (answer) {
      const a = el('div', 'answer');
      renderInto(a, answer);
      box.append(a);
    }
    if (d.error) box.append(el('div', 'err', d.error));
    if (!answer && !d.error) box.append(el('p', 'note', `the run ended: ${status}, ${plural(d.steps || 0, 'step')}`));
    this.on.scroll(() => this.section.append(box));
    this.head.draw();
    return true;
  }

  toggleTrace() {
    const open = this.traceBox.hidden;
    this.traceBox.hidden = !open;
    this.head.traceBtn.setAttribute('aria-expanded', String(open));
    if (open) loadTrace(this.run.id, this.traceBox);
  }

  dispose() { this.head.dispose(); }
}
