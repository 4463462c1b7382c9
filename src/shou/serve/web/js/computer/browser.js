// The Browser tab: the screenshots the run's browser calls returned. The chosen one (the latest unless one
// was picked) large, with the page's URL and title; click it to enlarge; a filmstrip of all of them below.

import { getBlob } from '../api.js';
import { $, el } from '../util.js';

const fetched = new Map();  // fetch path -> a blob: URL of the screenshot the server kept

/** Show `shot` in `img`: its data: URL, or the image the server kept, fetched once with the token. */
function show(img, shot) {
  if (shot.src) { img.src = shot.src; return; }
  const have = fetched.get(shot.fetchPath);
  if (have) { img.src = have; return; }
  getBlob(shot.fetchPath).then(blob => {
    const url = URL.createObjectURL(blob);
    fetched.set(shot.fetchPath, url);
    img.src = url;
  }).catch(() => { img.replaceWith(el('span', 'note', 'This screenshot is no longer kept.')); });
}

let picked = null;  // the key of the screenshot picked in the filmstrip, or null for the latest

export function reset() { picked = null; }
export function select(key) { picked = key; }

export function render(run, panel) {
  const shots = run ? run.screenshots() : [];
  panel.replaceChildren();
  const url = run ? run.browserUrl() : '';
  const bar = el('div', 'urlbar');
  bar.append(el('span', 'url-label', 'URL'), el('span', 'url', url || '—'));
  panel.append(bar);
  if (!shots.length) {
    panel.append(el('p', 'empty', run ? 'No screenshots in this run.' : 'No run selected.'));
    return;
  }
  const shown = shots.find(s => s.key === picked) || shots[shots.length - 1];
  const main = el('button', 'shot-main');
  main.type = 'button';
  main.setAttribute('aria-label', 'Enlarge the screenshot');
  const img = el('img');
  show(img, shown);
  img.alt = 'Screenshot' + (shown.title ? ' of ' + shown.title : '') + (shown.url ? ' (' + shown.url + ')' : '');
  main.append(img);
  main.addEventListener('click', () => enlarge(shown));
  panel.append(el('div', 'shot-caption', [shown.title, shown.url].filter(Boolean).join(' — ')), main);
  panel.append(filmstrip(shots, shown, run, panel));
}

function filmstrip(shots, shown, run, panel) {
  const strip = el('div', 'filmstrip');
  strip.setAttribute('role', 'list');
  strip.setAttribute('aria-label', 'All screenshots of this run');
  shots.forEach((s, i) => {
    const b = el('button', 'thumb' + (s === shown ? ' current' : ''));
    b.type = 'button';
    b.setAttribute('role', 'listitem');
    b.setAttribute('aria-label', `Screenshot ${i + 1}${s.title ? ': ' + s.title : ''}`);
    if (s === shown) b.setAttribute('aria-current', 'true');
    const t = el('img');
    show(t, s);
    t.alt = '';
    b.append(t);
    b.addEventListener('click', () => { picked = s.key; render(run, panel); });
    strip.append(b);
  });
  return strip;
}

function enlarge(shot) {
  const dialog = $('#lightbox');
  const img = $('#lightbox-img');
  show(img, shot);
  img.alt = 'Screenshot' + (shot.title ? ' of ' + shot.title : '');
  $('#lightbox-caption').textContent = [shot.title, shot.url].filter(Boolean).join(' — ');
  dialog.showModal();
}

export function setup() {
  const dialog = $('#lightbox');
  $('#lightbox-close').addEventListener('click', () => dialog.close());
  dialog.addEventListener('click', ev => { if (ev.target === dialog) dialog.close(); });  // outside the picture
}
