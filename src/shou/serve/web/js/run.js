// A run as data, folded from its events: its status and usage, its tool calls with their results, its plan
// and its sub-runs. The chat (runview.js) and the computer pane (computer/*.js) both read this one fold of
// the one event stream, so a run reopened later (its stored events replayed) shows what it showed live.

import { parseArgs, imageSrc } from './util.js';

export const ACTIVE = new Set(['queued', 'running', 'waiting_approval', 'waiting_input']);
const WRITERS = new Set(['write_file', 'edit_file']);
const TERMINAL = new Set(['shell', 'run_code', 'python']);

export class Run {
  constructor(info) {
    this.id = String(info.run_id || '');
    this.task = String(info.task || '');
    this.status = String(info.status || 'queued');
    this.usage = null;
    this.steps = 0;
    this.wall = null;       // seconds, once finished
    this.started = 0;       // epoch seconds, from run_started
    this.answer = '';
    this.error = null;
    this.calls = new Map(); // "runId:callId" -> call, in the order they started
    this.plans = new Map(); // run id (this run or a sub-run) -> its latest plan event
    this.subs = new Map();  // sub-run id -> {id, parent, task, status, answer, error}
    this.listeners = new Set();
  }

  get over() { return !ACTIVE.has(this.status); }

  /** Call `fn(what, run)` on every change; returns the function that stops it. */
  on(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); }
  emit(what) { for (const f of [...this.listeners]) f(what, this); }

  /** Fold one event in; tells the listeners what changed. */
  apply(d) {
    const top = !d.parent && (!d.run_id || d.run_id === this.id);
    const what = top ? this.applyTop(d) : this.applySub(d);
    if (d.type === 'tool_call_started' || d.type === 'tool_call_finished') this.applyCall(d);
    else if (d.type === 'plan') this.plans.set(String(d.run_id || this.id), d);
    const kind = { tool_call_started: 'call', tool_call_finished: 'result', plan: 'plan' }[d.type] || what;
    if (kind) this.emit(kind);
  }

  applyTop(d) {
    switch (d.type) {
      case 'run_started': this.started = Number(d.started_at) || 0; this.task = this.task || String(d.task || '');
        this.status = 'running'; return 'status';
      case 'run_resumed': case 'approval_decided': case 'input_answered': this.status = 'running'; return 'status';
      case 'step_finished': this.usage = d.usage || this.usage; this.steps = Math.max(this.steps, Number(d.step) || 0);
        return 'status';
      case 'run_finished':
        if (d.status === 'waiting_approval' || d.status === 'waiting_input') { this.status = d.status; return 'status'; }
        Object.assign(this, { status: String(d.status || 'unknown'), answer: String(d.answer || ''),
                              error: d.error || null, wall: Number(d.wall_time) || 0 });
        if (d.usage && Object.keys(d.usage).length) this.usage = d.usage;
        if (typeof d.steps === 'number' && d.steps) this.steps = d.steps;
        return 'status';
      default: return null;
    }
  }

  applySub(d) {
    const id = String(d.run_id || '');
    if (d.type === 'run_started') {
      this.subs.set(id, { id, parent: String(d.parent || ''), task: String(d.task || ''), status: 'running',
                          answer: '', error: null });
      return 'sub';
    }
    if (d.type === 'run_finished' && this.subs.has(id)) {
      Object.assign(this.subs.get(id), { status: String(d.status || ''), answer: String(d.answer || ''),
                                         error: d.error || null });
      return 'sub';
    }
    return null;
  }

  applyCall(d) {
    const runId = String(d.run_id || this.id);
    if (d.type === 'tool_call_started') {
      const c = d.call || {};
      const fn = c.function || c;
      const args = fn.arguments !== undefined ? fn.arguments : c.arguments;
      const key = runId + ':' + String(c.id || '');
      if (!this.calls.has(key)) {
        this.calls.set(key, { key, id: String(c.id || ''), name: String(fn.name || '?'), args: parseArgs(args),
                              argsText: typeof args === 'string' ? args : JSON.stringify(args || {}), runId,
                              sub: runId !== this.id, step: Number(d.step) || 0, result: null });
      }
      return;
    }
    const key = runId + ':' + String(d.call_id || '');
    if (!this.calls.has(key)) {
      this.calls.set(key, { key, id: String(d.call_id || ''), name: String(d.name || '?'), args: null, argsText: '',
                            runId, sub: runId !== this.id, step: Number(d.step) || 0, result: null });
    }
    this.calls.get(key).result = { content: String(d.content ?? ''), isError: !!d.is_error,
                                   latency: Number(d.latency) || 0, image: d.image || null,
                                   details: d.details && typeof d.details === 'object' ? d.details : null };
  }

  /** Workspace paths this run (and its sub-runs) changed: write_file/edit_file calls that succeeded, and
   *  files a shell or code call's details list. */
  changedFiles() {
    const out = new Map();
    for (const c of this.calls.values()) {
      if (!c.result || c.result.isError) continue;
      const paths = WRITERS.has(c.name) ? [c.args && c.args.path] : TERMINAL.has(c.name) ? listed(c.result.details) : [];
      for (const p of paths) {
        if (typeof p === 'string' && p.trim()) out.set(normal(p), c.name);
      }
    }
    return [...out].map(([path, tool]) => ({ path, tool }));
  }

  /** The images (screenshots) the run's calls returned, oldest first: {key, src (a data: URL), url, title}. */
  screenshots() {
    const out = [];
    for (const c of this.calls.values()) {
      if (!c.result) continue;
      const src = imageSrc(c.result.image);
      const det = c.result.details || {};
      // a model that cannot see images got the page's text: the image itself is kept by the server
      const kept = !src && c.name === 'browser' && det.path;
      if (!src && !kept) continue;
      const fetchPath = kept ? `/v1/runs/${encodeURIComponent(this.id)}/screenshots/${encodeURIComponent(c.id)}` : '';
      out.push({ key: c.key, src: src || '', fetchPath, url: String(det.url || ''), title: String(det.title || ''),
                 name: c.name });
    }
    return out;
  }

  /** The URL the browser was last at, as its calls reported it. */
  browserUrl() {
    let url = '';
    for (const c of this.calls.values()) {
      if (c.name === 'browser' && c.result && c.result.details && c.result.details.url) url = String(c.result.details.url);
    }
    return url;
  }

  /** Shell and code calls, in order. */
  terminalCalls() { return [...this.calls.values()].filter(c => TERMINAL.has(c.name)); }
}

/** Files a sandboxed call's details name, if any (a list of paths under `files` or `changed`). */
function listed(details) {
  if (!details) return [];
  const v = details.files || details.changed || details.written;
  return Array.isArray(v) ? v.map(x => (x && typeof x === 'object' ? x.path : x)) : [];
}

/** A workspace path as the files API spells it: no "./", no leading or doubled slashes. */
export function normal(path) {
  return String(path).trim().replace(/\\/g, '/').split('/').filter(p => p && p !== '.').join('/');
}
