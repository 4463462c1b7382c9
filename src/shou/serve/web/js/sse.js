// A run's event stream (GET /v1/runs/{id}/events, Server-Sent Events) read with fetch(), since EventSource
// cannot send the token. It replays the stored events, then follows live ones; a dropped connection is
// resumed with Last-Event-ID, so nothing is lost or shown twice. It ends after the run's final run_finished.

import { api, AuthError, waitToken } from './api.js';

/** The events of one SSE body, as they arrive: calls `onMessage(data, id)` per message. */
async function readBody(res, onMessage, isOver) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '', data = [], event = '', id = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let m;
    while ((m = /\r\n|\n|\r(?!$)/.exec(buf))) {
      const line = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      if (line === '') {
        if (data.length) onMessage(data.join('\n'), event, id);
        data = []; event = ''; id = null;
        continue;
      }
      if (line[0] === ':') continue;  // a keep-alive comment
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? '' : line.slice(colon + 1);
      if (val[0] === ' ') val = val.slice(1);
      if (field === 'data') data.push(val);
      else if (field === 'event') event = val;
      else if (field === 'id') id = val;
    }
    if (isOver()) { reader.cancel().catch(() => {}); return; }
  }
}

/**
 * Stream run `runId`'s events into `handle(event)`, which returns true on the event that ends the run.
 * Resolves when the run is over or `signal` aborts; `onTrouble(message | null)` reports reconnecting.
 */
export async function followRun(runId, handle, signal, onTrouble) {
  let lastId = null, over = false, tries = 0;
  const onMessage = (text, event, id) => {
    if (id !== null) lastId = id;
    let d = null;
    try { d = JSON.parse(text); } catch (e) { return; }  // not JSON: skip
    if (!d || typeof d !== 'object') return;
    if (!d.type) d.type = event;
    if (handle(d)) over = true;
  };
  while (!over && !signal.aborted) {
    try {
      const headers = { Accept: 'text/event-stream' };
      if (lastId !== null) headers['Last-Event-ID'] = lastId;
      const res = await api('v1/runs/' + encodeURIComponent(runId) + '/events', { headers, signal });
      if (!res.ok) {
        if (res.status >= 400 && res.status < 500) { onTrouble(`stream: ${res.status} ${res.statusText}`, true); return; }
        throw new Error(`${res.status}`);
      }
      if (tries) onTrouble(null);
      tries = 0;
      await readBody(res, onMessage, () => over);
      if (!over) throw new Error('the stream ended early');
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof AuthError) { await waitToken(); continue; }
      tries += 1;
      onTrouble(`reconnecting… (${e.message})`);
      await new Promise(r => setTimeout(r, Math.min(500 * tries, 5000)));
    }
  }
}
