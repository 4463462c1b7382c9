// A workspace file shown in the Files tab. Its bytes are fetched with the token and shown from memory:
// text (code highlighted), Markdown rendered (sanitised), images, HTML in an iframe that runs nothing
// (sandbox without allow-scripts or allow-same-origin, and a CSP of its own that loads nothing), PDF in the
// browser's viewer where it has one. Workspace files are untrusted: none of them runs in this page.

import { el, enc, button, bytes } from '../util.js';
import { getBlob, AuthError } from '../api.js';
import { markdown, highlight, languageOf } from '../markdown.js';

const TEXT_LIMIT = 1024 * 1024;
const FRAME_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:";
let url = null;  // the blob URL the preview shows, revoked when it changes
let shown = 0;   // which preview is the latest (an earlier one that finishes loading later is dropped)

const ext = name => (name.includes('.') ? name.toLowerCase().split('.').pop() : '');
const IMAGES = new Set(['png', 'jpg', 'jpeg', 'gif', 'webp', 'svg', 'bmp', 'ico', 'avif']);

function blobUrl(blob, type) {
  if (url) URL.revokeObjectURL(url);
  url = URL.createObjectURL(type ? new Blob([blob], { type }) : blob);
  return url;
}

/** The file's bytes saved by the browser under its name. */
export async function download(path, onError) {
  try {
    const blob = await getBlob('v1/files/content?download=1&path=' + enc(path));
    const a = el('a');
    a.href = URL.createObjectURL(blob);
    a.download = path.split('/').pop();
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 60000);
  } catch (e) {
    if (!(e instanceof AuthError)) onError(`Could not download ${path}: ${e.message}`);
  }
}

/** An iframe showing `html` with nothing of it able to run or load. */
function htmlFrame(html, name) {
  const frame = el('iframe', 'preview-frame');
  frame.setAttribute('sandbox', '');  // no scripts, an opaque origin, no forms, popups or top navigation
  frame.setAttribute('referrerpolicy', 'no-referrer');
  frame.title = 'Preview of ' + name;
  frame.srcdoc = `<!doctype html><meta http-equiv="Content-Security-Policy" content="${FRAME_CSP}">` + html;
  return frame;
}

async function body(path, blob) {
  const name = path.split('/').pop();
  const type = (blob.type || '').split(';')[0].trim().toLowerCase();
  const e = ext(name);
  if (IMAGES.has(e) || type.startsWith('image/')) {
    const img = el('img', 'preview-img');
    img.alt = name;
    img.src = blobUrl(blob, e === 'svg' ? 'image/svg+xml' : null);  // as an image an SVG runs nothing
    return img;
  }
  if (e === 'pdf' || type === 'application/pdf') {
    const frame = el('iframe', 'preview-frame');
    frame.title = 'Preview of ' + name;
    frame.src = blobUrl(blob, 'application/pdf');  // typed PDF: the viewer shows it, nothing parses it as a page
    return frame;
  }
  const text = await blob.slice(0, TEXT_LIMIT).text();
  if (!type.startsWith('text/') && !/json|javascript|xml|yaml|toml/.test(type) && /\u0000/.test(text.slice(0, 4096))) {
    return el('p', 'empty', `A binary file (${bytes(blob.size)}): download it to open it.`);
  }
  const cut = blob.size > TEXT_LIMIT ? el('p', 'note', `showing the first ${bytes(TEXT_LIMIT)} of ${bytes(blob.size)}`) : null;
  let node;
  if (e === 'html' || e === 'htm' || type === 'text/html') node = htmlFrame(text, name);
  else if (e === 'md' || e === 'markdown' || type === 'text/markdown') {
    node = el('div', 'preview-md md');
    node.append(markdown(text));
  } else {
    node = el('pre', 'preview-text');
    const code = el('code', '', text);
    highlight(code, languageOf(name));
    node.append(code);
  }
  if (!cut) return node;
  const box = el('div');
  box.append(cut, node);
  return box;
}

/** Show workspace file `path` in `box`. */
export async function showFile(path, box, onError) {
  const mine = ++shown;
  const head = el('div', 'preview-head');
  head.append(el('span', 'preview-name', path), button('Download', 'download', () => download(path, onError),
                                                         'Download ' + path));
  const content = el('div', 'preview-body', 'loading…');
  content.tabIndex = 0;  // a long file scrolls here
  box.replaceChildren(head, content);
  box.hidden = false;
  try {
    const node = await body(path, await getBlob('v1/files/content?path=' + enc(path)));
    if (mine === shown) content.replaceChildren(node);
  } catch (e) {
    if (mine === shown && !(e instanceof AuthError)) content.replaceChildren(el('p', 'note bad', e.message));
  }
}
