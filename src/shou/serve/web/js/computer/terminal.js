// The Terminal tab: the run's shell commands and code as a terminal transcript: the command (or the
// program), its output in its ANSI colours, and how it ended (exit code, or why it was stopped).

import { el, unfenced } from '../util.js';
import { ansi } from '../ansi.js';

/** stdout and stderr of a sandboxed call's result text (see ExecResult.for_model), without its first line. */
function sections(content) {
  const lines = unfenced(content).split('\n');
  if (/^(exit code|stopped:|ended:)/.test(lines[0] || '')) lines.shift();
  const out = [];
  let kind = 'out';
  for (const line of lines) {
    if (line === '--- stdout ---') { kind = 'out'; continue; }
    if (line === '--- stderr ---') { kind = 'err'; continue; }
    const last = out[out.length - 1];
    if (last && last.kind === kind) last.text += '\n' + line; else out.push({ kind, text: line });
  }
  return out;
}

function ending(call) {
  const r = call.result;
  if (!r) return el('div', 'term-exit running', 'running…');
  const det = r.details || {};
  const code = det.exit_code;
  let text;
  if (det.reason && det.reason !== 'exit') text = `stopped: ${det.reason}`;
  else if (typeof code === 'number') text = `exit code ${code}`;
  else text = r.isError ? 'error' : 'done';
  const ok = typeof code === 'number' ? code === 0 && (!det.reason || det.reason === 'exit') : !r.isError;
  const dur = typeof det.duration === 'number' ? ` · ${det.duration.toFixed(2)} s` : '';
  return el('div', 'term-exit ' + (ok ? 'ok' : 'bad'), text + dur);
}

function entry(call) {
  const box = el('div', 'term-entry');
  const a = call.args || {};
  if (call.name === 'shell') {
    const cmd = el('div', 'term-cmd');
    cmd.append(el('span', 'prompt', '$ '), el('span', 'cmd', String(a.command ?? call.argsText)));
    box.append(cmd);
  } else {
    const lang = String(a.language || (call.name === 'python' ? 'python' : 'code'));
    box.append(el('div', 'term-cmd', `▶ ${lang}${a.stateful ? ' (stateful)' : ''}`));
    box.append(el('pre', 'term-code', String(a.code ?? call.argsText)));
  }
  if (call.result) {
    for (const s of sections(call.result.content)) {
      const pre = el('pre', 'term-out' + (s.kind === 'err' ? ' stderr' : ''));
      pre.append(ansi(s.text));
      box.append(pre);
    }
  }
  box.append(ending(call));
  return box;
}

export function render(run, panel) {
  const calls = run ? run.terminalCalls() : [];
  const term = el('div', 'terminal');
  term.setAttribute('role', 'log');
  term.setAttribute('aria-label', 'Shell and code calls');
  term.tabIndex = 0;
  if (!calls.length) term.append(el('p', 'term-empty', run ? 'No shell or code calls in this run.' : 'No run selected.'));
  for (const c of calls) term.append(entry(c));
  panel.replaceChildren(term);
  term.scrollTop = term.scrollHeight;
}
