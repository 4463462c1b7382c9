// The Files tab: the workspace as the file tools see it (GET /v1/files; never .shou/), the files the
// followed run changed marked (and listed on top), a preview of the file picked, its download, and an upload
// into the workspace (PUT /v1/files/content, refused wherever write_file would refuse: ../x, .shou/, ...).
//
// The marks are the followed run's alone (from its events, so the same live and reopened) and are drawn the
// moment the tab is drawn, over whatever listing it has; the listing is fetched apart and may arrive late, so
// the tree never waits for it to show the run's marks, and a listing answered after a newer one of the same
// folder is dropped. #tree's aria-busy is "true" while a listing it asked for has not been drawn.

import { $, el, button, bytes } from '../util.js';
import { getJSON, putFile, AuthError } from '../api.js';
import { normal } from '../run.js';
import { showFile } from './preview.js';

const folders = new Map();  // folder path -> {entries, truncated} | {error}
const open = new Set(['']); // folders shown expanded
let changed = new Map();    // path -> the tool that changed it, for the followed run
let picked = '';            // the file in the preview
let stale = true;
let timer = null;
const asked = new Map();    // folder path -> the number of its latest request: only that one's answer is kept
let requests = 0;           // numbers the requests
let loading = 0;            // reloads (and folder openings) not yet drawn

const panel = () => $('#tab-files');
const report = (text, bad) => { const m = $('#upload-msg'); m.textContent = text; m.classList.toggle('bad', !!bad); };

async function loadFolder(path) {
  const mine = ++requests;
  asked.set(path, mine);
  // Answers can arrive out of order (a busy server, two reloads in flight): one older than the folder's latest
  // request would put back a listing from before the files the newer one saw.
  const latest = () => asked.get(path) === mine;
  try {
    const data = await getJSON('v1/files?path=' + encodeURIComponent(path));
    if (latest()) folders.set(path, { entries: data.entries || [], truncated: !!data.truncated });
  } catch (e) {
    if (e instanceof AuthError) return;
    if (latest()) folders.set(path, { error: e.message });
  }
}

/** Load `paths` (folders), then redraw the tree; #tree is aria-busy until every load begun is drawn. */
async function load(paths) {
  loading += 1;
  busy();
  try {
    await Promise.all(paths.map(loadFolder));
  } finally {
    loading -= 1;
    drawTree();
  }
}

const busy = () => $('#tree').setAttribute('aria-busy', String(loading > 0));

/** Read every open folder again and redraw the tree. */
export async function reload() {
  stale = false;
  clearTimeout(timer);  // this reload asks after whatever the pending one was for
  timer = null;
  await load([...open]);
}

/** The followed run changed (`what`): remember its changed files; reload the tree when it may have written. */
export function runChanged(run, what) {
  changed = new Map(run ? run.changedFiles().map(f => [f.path, f.tool]) : []);
  if (what !== 'result' && what !== 'status') return;
  stale = true;
  if (panel().hidden) return;
  clearTimeout(timer);
  timer = setTimeout(reload, 250);
}

export function render() {
  drawChanged();
  drawTree();  // the followed run's marks now, on the listing at hand: not the last run's until a reload answers
  if (stale) reload();
}

function drawChanged() {
  const box = $('#changed');
  box.replaceChildren();
  if (!changed.size) { box.append(el('p', 'empty', 'This run changed no files.')); return; }
  box.append(el('h3', 'pane-h', 'Changed in this run'));
  const ul = el('ul', 'changed-list');
  for (const [path, tool] of changed) {
    const li = el('li');
    li.append(button(path, 'file-link', () => pick(path), `Preview ${path} (changed by ${tool})`));
    ul.append(li);
  }
  box.append(ul);
}

function drawTree() {
  const tree = $('#tree');
  tree.replaceChildren(folderList(''));
  busy();
}

function folderList(path) {
  const f = folders.get(path);
  const ul = el('ul', 'tree-list');
  if (!f) { ul.append(el('li', 'empty', 'loading…')); return ul; }
  if (f.error) { ul.append(el('li', 'note bad', f.error)); return ul; }
  if (!f.entries.length) ul.append(el('li', 'empty', path ? 'empty folder' : 'the workspace is empty'));
  for (const e of f.entries) ul.append(entry(e));
  if (f.truncated) ul.append(el('li', 'note', 'more entries are not listed'));
  return ul;
}

function entry(e) {
  const p = normal(e.path);
  const li = el('li', e.type === 'dir' ? 'dir' : 'file');
  li.dataset.path = p;
  const isChanged = changed.has(p) || (e.type === 'dir' && [...changed.keys()].some(c => c.startsWith(p + '/')));
  li.classList.toggle('changed', isChanged);
  li.classList.toggle('picked', p === picked);
  if (e.type === 'dir') {
    const b = button(e.name + '/', 'entry', () => toggle(p));
    b.setAttribute('aria-expanded', String(open.has(p)));
    li.append(b);
  } else {
    li.append(button(e.name, 'entry', () => pick(p)));
    li.append(el('span', 'size', bytes(e.size)));
  }
  if (isChanged) li.append(el('span', 'badge', 'changed'));
  if (e.type === 'dir' && open.has(p)) li.append(folderList(p));
  return li;
}

async function toggle(path) {
  if (open.has(path)) { open.delete(path); drawTree(); return; }
  open.add(path);
  drawTree();
  await load([path]);
}

function pick(path) {
  picked = path;
  const folder = path.includes('/') ? path.slice(0, path.lastIndexOf('/') + 1) : '';
  const as = $('#upload-path');
  if (!as.value) as.placeholder = folder + 'name';
  drawTree();
  showFile(path, $('#preview'), msg => report(msg, true));
}

async function upload(ev) {
  ev.preventDefault();
  const file = $('#upload-file').files[0];
  if (!file) { report('Choose a file first.', true); return; }
  const path = $('#upload-path').value.trim() || file.name;
  report('uploading…');
  try {
    const r = await putFile(path, file);
    report(`Uploaded ${r.path} (${bytes(r.size)}).`);
    $('#upload-form').reset();
    await reload();
  } catch (e) {
    if (!(e instanceof AuthError)) report(`Refused: ${e.message}`, true);
  }
}

export function setup() {
  $('#upload-form').addEventListener('submit', upload);
  $('#upload-file').addEventListener('change', () => {
    const file = $('#upload-file').files[0];
    if (file && !$('#upload-path').value) $('#upload-path').value = file.name;
  });
  $('#files-refresh').addEventListener('click', reload);
}
