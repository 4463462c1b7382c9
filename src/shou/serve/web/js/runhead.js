// A run's header: status, steps, tokens, cost (in the configured currency), duration, and its buttons:
// Trace (the timeline), Computer (follow this run in the computer pane) and Stop while it runs. It is drawn
// from the run's fold alone, so a run reopened later has the same header as it had live.

import { el, button, secs, plural, count, num } from './util.js';
import { money } from './config.js';

const LABELS = { waiting_approval: 'waiting for approval', waiting_input: 'waiting for your answer',
  max_steps: 'step limit', queued: 'queued', blocked: 'blocked by a guardrail', invalid_output: 'answer not valid' };

export class RunHead {
  /** `on`: {trace(), stop(), select()} */
  constructor(run, on) {
    this.run = run;
    this.el = el('div', 'run-head');
    this.status = el('span', 'status');
    this.steps = el('span', 'steps');
    this.tokens = el('span', 'tokens');
    this.cost = el('span', 'cost');
    this.dur = el('span', 'dur');
    const facts = el('div', 'facts');
    facts.append(this.status, this.steps, this.tokens, this.cost, this.dur);
    this.traceBtn = button('Trace', 'trace-toggle', on.trace);
    this.traceBtn.setAttribute('aria-expanded', 'false');
    this.computerBtn = button('Computer', 'computer-btn', on.select);
    this.stopBtn = button('Stop', 'stop danger', on.stop);
    const acts = el('div', 'acts');
    acts.append(this.traceBtn, this.computerBtn, this.stopBtn);
    this.el.append(facts, acts);
    this.timer = null;
    run.on(what => { if (what === 'status') this.draw(); });
    this.draw();
  }

  draw() {
    const r = this.run;
    this.status.className = 'status ' + r.status;
    this.status.textContent = LABELS[r.status] || r.status;
    this.steps.textContent = plural(r.steps, 'step');
    const u = r.usage || {};
    this.tokens.textContent = `${count(u.input_tokens)} in · ${count(u.output_tokens)} out tokens`;
    this.cost.textContent = 'cost ' + money(u.cost);
    this.stopBtn.hidden = r.over;
    if (r.over) {
      clearInterval(this.timer);
      this.timer = null;
      this.dur.textContent = secs(num(r.wall));
    } else {
      this.tick();
      if (!this.timer) this.timer = setInterval(() => this.tick(), 1000);
    }
  }

  /** While running: the time since the run started (0 until its first event). */
  tick() {
    if (this.run.over) return;
    const s = this.run.started ? Math.max(0, Date.now() / 1000 - this.run.started) : 0;
    this.dur.textContent = Math.floor(s) + ' s';
  }

  stopping() { this.stopBtn.disabled = true; this.stopBtn.textContent = 'Stopping…'; }
  dispose() { clearInterval(this.timer); }
}
