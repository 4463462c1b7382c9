// Markdown as people read it: marked turns the text into HTML, DOMPurify keeps only harmless HTML of it,
// highlight.js colours code. Model output and workspace files are untrusted, so what reaches the page has no
// script, no event handler, no style, no frame or form, and links only to http(s) and mailto, opening in a
// new tab without access to this page (rel="noopener noreferrer"). Images are shown as links: the page loads
// nothing from elsewhere (its CSP would refuse it anyway), and a remote image would tell its server who looked.

import { Marked } from '../vendor/marked.esm.js';
import DOMPurify from '../vendor/purify.es.mjs';
import hljs from '../vendor/highlight.min.js';

const marked = new Marked({ gfm: true, breaks: false, async: false });
const LINK = /^(?:https?:|mailto:)/i;

// Two sanitisers: one for Markdown's HTML, one for highlight.js's spans (made from escaped text already).
const purify = DOMPurify(window);
const purifyCode = DOMPurify(window);
const CONFIG = {
  USE_PROFILES: { html: true },  // no SVG, no MathML
  FORBID_TAGS: ['style', 'form', 'button', 'textarea', 'select', 'option', 'iframe', 'frame', 'object', 'embed',
                'link', 'meta', 'base', 'video', 'audio', 'source', 'picture', 'dialog', 'template'],
  FORBID_ATTR: ['style', 'id', 'name', 'srcset', 'action', 'formaction', 'background', 'ping'],
  ALLOWED_URI_REGEXP: LINK,
  RETURN_DOM_FRAGMENT: true,
};
purify.addHook('afterSanitizeAttributes', node => {
  if (node.nodeName === 'A') {
    if (!LINK.test(node.getAttribute('href') || '')) node.removeAttribute('href');
    else { node.setAttribute('target', '_blank'); node.setAttribute('rel', 'noopener noreferrer'); }
  }
  // classes only as marked gives them to code (the language), so no text can dress up as the page's parts
  const cls = node.getAttribute && node.getAttribute('class');
  if (cls !== null && cls !== undefined && !(node.nodeName === 'CODE' && /^language-[\w+#.-]+$/.test(cls))) {
    node.removeAttribute('class');
  }
  if (node.nodeName === 'INPUT') {  // a task list's box; nothing else may be an input
    if ((node.getAttribute('type') || '').toLowerCase() === 'checkbox') node.setAttribute('disabled', '');
    else node.remove();
  }
});

const EXT = { mjs: 'javascript', cjs: 'javascript', htm: 'xml', html: 'xml', svg: 'xml', toml: 'ini', cfg: 'ini',
              conf: 'ini', jsonl: 'json', h: 'c', hpp: 'cpp', cc: 'cpp', txt: null, log: null, csv: null };

/** The highlight.js language for a file name, or null. */
export function languageOf(name) {
  const ext = String(name || '').toLowerCase().split('.').pop();
  if (ext in EXT) return EXT[ext];
  return hljs.getLanguage(ext) ? ext : null;
}

/** Colour `code` (an element whose text is source code) as `language`; unknown languages stay plain. */
export function highlight(code, language) {
  const text = code.textContent;
  if (!language || !hljs.getLanguage(language) || text.length > 300000) return;
  let html;
  try { html = hljs.highlight(text, { language, ignoreIllegals: true }).value; } catch (e) { return; }
  code.replaceChildren(purifyCode.sanitize(html, { ALLOWED_TAGS: ['span'], ALLOWED_ATTR: ['class'],
                                                   RETURN_DOM_FRAGMENT: true }));
  code.classList.add('hljs');
}

/** Images become links to them (or their text): the page loads nothing from elsewhere. */
function imagesAsLinks(frag) {
  for (const img of frag.querySelectorAll('img')) {
    const src = img.getAttribute('src') || '';
    const label = '[image' + (img.getAttribute('alt') ? ': ' + img.getAttribute('alt') : '') + ']';
    const a = document.createElement(LINK.test(src) ? 'a' : 'span');
    a.textContent = label;
    if (a.nodeName === 'A') { a.href = src; a.target = '_blank'; a.rel = 'noopener noreferrer'; }
    img.replaceWith(a);
  }
}

/** Markdown `text` as a sanitised DocumentFragment, its code blocks highlighted. */
export function markdown(text) {
  let html;
  try { html = marked.parse(String(text || '')); } catch (e) {
    const f = document.createDocumentFragment();
    f.append(String(text || ''));
    return f;
  }
  const frag = purify.sanitize(html.trim(), CONFIG);
  imagesAsLinks(frag);
  for (const code of frag.querySelectorAll('pre > code')) {
    const m = /^language-([\w+#.-]+)$/.exec(code.getAttribute('class') || '');
    highlight(code, m ? m[1].toLowerCase() : null);
  }
  for (const pre of frag.querySelectorAll('pre')) pre.tabIndex = 0;  // a wide block scrolls
  for (const table of frag.querySelectorAll('table')) {  // wide tables scroll in their own box
    const box = document.createElement('div');
    box.className = 'table-scroll';
    box.tabIndex = 0;  // it may scroll: reachable from the keyboard
    table.replaceWith(box);
    box.append(table);
  }
  return frag;
}

const sources = new WeakMap();

/** Render `text` into `target` as Markdown, replacing what it held. */
export function renderInto(target, text) {
  target.classList.add('md');
  target.replaceChildren(markdown(text));
  sources.set(target, String(text || ''));
}

/** The Markdown source last rendered into `target`. */
export const sourceOf = target => sources.get(target) || '';
