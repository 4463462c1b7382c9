// The server's API: every request carries the bearer token, which the page gets from the link's fragment
// (#token=...) or asks for. Files and images are fetched here too (with the header) and shown from blob URLs:
// nothing on the page names an API address in a src= that the browser would fetch without the token.

import { $ } from './util.js';

const TOKEN_KEY = 'shou.token';
let waiters = [];
let onToken = () => {};

export class AuthError extends Error {}
export class ApiError extends Error {
  constructor(message, status) { super(message); this.status = status; }
}

// `shou serve` prints a link with the token in the fragment (never sent to a server): keep it for this tab
// only, and take it out of the address bar, the history and any bookmark made from here on.
function tokenFromFragment() {
  const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (!m) return false;
  let value = '';
  try { value = decodeURIComponent(m[1]).trim(); } catch (e) { /* a mangled link: ask instead */ }
  history.replaceState(null, '', location.pathname + location.search);
  if (!value) return false;
  sessionStorage.setItem(TOKEN_KEY, value);
  return true;
}

/** fetch() with the token; a 401 opens the token dialog and throws AuthError. */
export async function api(path, opts) {
  opts = Object.assign({}, opts || {});
  const headers = Object.assign({}, opts.headers || {});
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = 'Bearer ' + token;
  const raw = opts.body instanceof Blob || opts.body instanceof ArrayBuffer;
  if (opts.body !== undefined && typeof opts.body !== 'string' && !raw) {
    headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(opts.body);
  }
  opts.headers = headers;
  const res = await fetch(path, opts);
  if (res.status === 401) { askToken(); throw new AuthError('a token is needed'); }
  return res;
}

async function failure(res) {
  let data = null;
  try { data = await res.json(); } catch (e) { /* no JSON body */ }
  const err = data && data.error;
  const message = (err && (err.message || (typeof err === 'string' ? err : ''))) || `${res.status} ${res.statusText}`;
  return new ApiError(message, res.status);
}

/** The JSON answer of a request, or an ApiError with the server's message. */
export async function getJSON(path, opts) {
  const res = await api(path, opts);
  if (!res.ok) throw await failure(res);
  try { return await res.json(); } catch (e) { return null; }
}

/** The bytes of an answer as a Blob (typed as the server said), or an ApiError. */
export async function getBlob(path) {
  const res = await api(path);
  if (!res.ok) throw await failure(res);
  return res.blob();
}

export const waitToken = () => new Promise(resolve => waiters.push(resolve));

function askToken() {
  const had = !!sessionStorage.getItem(TOKEN_KEY);
  $('#token-msg').textContent = had ? 'The server refused that token. Enter another.' : 'This server needs a bearer token.';
  $('#token-overlay').hidden = false;
  $('#token').focus();
}

function tokenGiven() {
  $('#token').value = '';
  $('#token-overlay').hidden = true;
  const waiting = waiters;
  waiters = [];
  waiting.forEach(f => f());
  onToken();
}

/** Read the link's token, wire the token dialog; `whenGiven` runs each time a new token is entered. */
export function setupToken(whenGiven) {
  onToken = whenGiven;
  tokenFromFragment();
  $('#token-form').addEventListener('submit', ev => {
    ev.preventDefault();
    const value = $('#token').value.trim();
    if (!value) return;
    sessionStorage.setItem(TOKEN_KEY, value);
    tokenGiven();
  });
  // The link pasted into a tab that already shows the page changes only the fragment: no new page load.
  window.addEventListener('hashchange', () => { if (tokenFromFragment()) tokenGiven(); });
}

/** Upload `blob` to workspace path `path` (PUT /v1/files/content); the server confines it as write_file. */
export function putFile(path, blob) {
  return getJSON('v1/files/content?path=' + encodeURIComponent(path),
                 { method: 'PUT', body: blob, headers: { 'Content-Type': 'application/octet-stream' } });
}
