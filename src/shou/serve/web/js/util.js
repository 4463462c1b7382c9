// Small helpers every module uses: making elements, formatting numbers and times, reading tool calls.
// Everything untrusted (model output, tool output, file names) goes into the page as text through el().

export const $ = (sel, root) => (root || document).querySelector(sel);
export const $$ = (sel, root) => [...(root || document).querySelectorAll(sel)];
export const enc = encodeURIComponent;

/** A new element with a class and text content (never HTML). */
export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

/** A button of `type="button"` with a label, a class and a click handler. */
export function button(label, cls, onClick, title) {
  const b = el('button', cls, label);
  b.type = 'button';
  if (title) { b.title = title; b.setAttribute('aria-label', title); }
  if (onClick) b.addEventListener('click', onClick);
  return b;
}

export const num = v => (typeof v === 'number' && isFinite(v) ? v : 0);
export const secs = s => (s < 10 ? s.toFixed(2) : s < 100 ? s.toFixed(1) : Math.round(s).toString()) + ' s';
export const count = n => num(n).toLocaleString('en-US');
export const plural = (n, word) => `${count(n)} ${word}${n === 1 ? '' : 's'}`;
export const clip = (s, n) => (s.length > n ? s.slice(0, n) + `\n… (${s.length - n} more characters)` : s);

export function bytes(n) {
  n = num(n);
  if (n < 1024) return `${n} B`;
  const units = ['KB', 'MB', 'GB'];
  let i = -1;
  do { n /= 1024; i += 1; } while (n >= 1024 && i < units.length - 1);
  return `${n < 10 ? n.toFixed(1) : Math.round(n)} ${units[i]}`;
}

/** A message's content as text (images as a placeholder). */
export function textOf(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map(p => (p && p.type === 'text' ? p.text : '[image]')).join('');
  return '';
}

/** A tool call's arguments as an object when they are JSON, else null. */
export function parseArgs(args) {
  if (args && typeof args === 'object') return args;
  try {
    const v = JSON.parse(args);
    return v && typeof v === 'object' ? v : null;
  } catch (e) { return null; }
}

/** Arguments shown to a person: indented JSON, or the raw text when they are not JSON. */
export function pretty(args) {
  if (typeof args !== 'string') return JSON.stringify(args === undefined ? {} : args, null, 2);
  const v = parseArgs(args);
  return v ? JSON.stringify(v, null, 2) : args;
}

/** {id, name, args} of a call as events carry it: {id, function: {name, arguments}} or flat. */
export function callParts(call) {
  call = call || {};
  const fn = call.function || call;
  return { id: String(call.id || call.call_id || ''), name: String(fn.name || call.tool || '?'),
           args: fn.arguments !== undefined ? fn.arguments : call.arguments };
}

/** Seconds since the epoch, from a number or an ISO date. */
export function when(v) {
  if (typeof v === 'number') return v;
  const t = Date.parse(v);
  return isNaN(t) ? 0 : t / 1000;
}

/** A tool's text without the <untrusted-content> fences shou puts around outside data for the model. */
export function unfenced(text) {
  return String(text || '').replace(/^<untrusted-content[^>\n]*>\n?|\n?<\/untrusted-content[^>\n]*>$/gm, '');
}

const IMAGE_TYPES = new Set(['image/png', 'image/jpeg', 'image/webp', 'image/gif']);

/** A tool result's image as a data: URL, or null: events carry it as {type: "image_url", image_url: {url}}
 *  (an ImagePart's wire form) or as {data, media_type}; only raster types in base64 are shown. */
export function imageSrc(img) {
  if (!img || typeof img !== 'object') return null;
  let type = img.media_type, data = img.data;
  const url = img.image_url && img.image_url.url;
  if (typeof url === 'string') {
    const m = /^data:([\w/+.-]+);base64,(.*)$/s.exec(url);
    if (!m) return null;
    [type, data] = [m[1], m[2]];
  }
  if (!IMAGE_TYPES.has(String(type).toLowerCase()) || typeof data !== 'string' || !/^[A-Za-z0-9+/=\s]*$/.test(data)) return null;
  return `data:${String(type).toLowerCase()};base64,${data}`;
}
