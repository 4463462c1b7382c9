// Terminal output with its ANSI colours (SGR: bold, italic, underline, the 16 colours, 256 colours and RGB)
// as text spans; every other escape sequence (cursor moves, titles, ...) is dropped. Output stays text: the
// spans are made with textContent, and colours are set through the style object, never as markup.

const ESC = /\x1b\[([0-9;:]*)([A-Za-z])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]/g;

function colour256(n) {
  if (n < 16) return { cls: n };
  if (n < 232) {
    n -= 16;
    const v = x => (x ? 55 + x * 40 : 0);
    return { rgb: `rgb(${v(Math.floor(n / 36))}, ${v(Math.floor(n / 6) % 6)}, ${v(n % 6)})` };
  }
  const g = 8 + (n - 232) * 10;
  return { rgb: `rgb(${g}, ${g}, ${g})` };
}

/** The style after applying SGR parameters `params` to `st`. */
function apply(st, params) {
  const p = params.length ? params.split(/[;:]/).map(x => parseInt(x || '0', 10)) : [0];
  for (let i = 0; i < p.length; i++) {
    const n = p[i];
    if (n === 0) st = {};
    else if (n === 1) st.bold = true;
    else if (n === 2) st.dim = true;
    else if (n === 3) st.italic = true;
    else if (n === 4) st.underline = true;
    else if (n === 22) { st.bold = false; st.dim = false; }
    else if (n === 23) st.italic = false;
    else if (n === 24) st.underline = false;
    else if (n >= 30 && n <= 37) st.fg = { cls: n - 30 };
    else if (n >= 90 && n <= 97) st.fg = { cls: n - 90 + 8 };
    else if (n >= 40 && n <= 47) st.bg = { cls: n - 40 };
    else if (n >= 100 && n <= 107) st.bg = { cls: n - 100 + 8 };
    else if (n === 39) st.fg = null;
    else if (n === 49) st.bg = null;
    else if ((n === 38 || n === 48) && p[i + 1] === 5) { st[n === 38 ? 'fg' : 'bg'] = colour256(p[i + 2] || 0); i += 2; }
    else if ((n === 38 || n === 48) && p[i + 1] === 2) {
      st[n === 38 ? 'fg' : 'bg'] = { rgb: `rgb(${p[i + 2] || 0}, ${p[i + 3] || 0}, ${p[i + 4] || 0})` };
      i += 4;
    }
  }
  return Object.assign({}, st);
}

function span(text, st) {
  const plain = !st.bold && !st.dim && !st.italic && !st.underline && !st.fg && !st.bg;
  if (plain) return document.createTextNode(text);
  const s = document.createElement('span');
  s.textContent = text;
  const cls = [];
  if (st.bold) cls.push('ansi-bold');
  if (st.dim) cls.push('ansi-dim');
  if (st.italic) cls.push('ansi-italic');
  if (st.underline) cls.push('ansi-underline');
  if (st.fg && st.fg.cls !== undefined) cls.push('ansi-fg-' + st.fg.cls);
  if (st.bg && st.bg.cls !== undefined) cls.push('ansi-bg-' + st.bg.cls);
  if (cls.length) s.className = cls.join(' ');
  if (st.fg && st.fg.rgb) s.style.color = st.fg.rgb;
  if (st.bg && st.bg.rgb) s.style.backgroundColor = st.bg.rgb;
  return s;
}

/** `text` with ANSI escapes as a DocumentFragment of text and coloured spans. */
export function ansi(text) {
  const frag = document.createDocumentFragment();
  let st = {}, last = 0, m;
  text = String(text || '');
  ESC.lastIndex = 0;
  while ((m = ESC.exec(text))) {
    if (m.index > last) frag.append(span(text.slice(last, m.index), st));
    if (m[2] === 'm') st = apply(st, m[1]);
    last = ESC.lastIndex;
  }
  if (last < text.length) frag.append(span(text.slice(last), st));
  return frag;
}

/** `text` without its escape sequences (for places that show plain text). */
export const stripAnsi = text => String(text || '').replace(ESC, '');
