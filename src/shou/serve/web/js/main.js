// The page's entry point: wires the token, the sidebar, the chat, the computer pane, the usage view and the
// keyboard (Esc stops the running run, or closes what is open), then loads the sessions.

import { $ } from './util.js';
import { setupToken } from './api.js';
import { loadConfig, config } from './config.js';
import { setupApprovals } from './approvals.js';
import { setupQuestions } from './questions.js';
import { setupChat, newChat, refresh, note, stopRun, isLive } from './chat.js';
import { setupAttachments } from './attachments.js';
import { setupPane } from './computer/pane.js';
import * as files from './computer/files.js';
import { setupUsage, loadUsage } from './usage.js';

/** Which view the main area shows: the chat or the usage. */
function showView(name) {
  document.body.dataset.view = name;
  $('#chat-view').hidden = name !== 'chat';
  $('#usage-view').hidden = name !== 'usage';
  $('#show-usage').setAttribute('aria-pressed', String(name === 'usage'));
  closeDrawer();
  if (name === 'usage') loadUsage();
}

function closeDrawer() {
  document.body.dataset.drawer = '';
  $('#menu').setAttribute('aria-expanded', 'false');
}

function setupLayout() {
  $('#menu').addEventListener('click', () => {
    const open = document.body.dataset.drawer !== 'open';
    document.body.dataset.drawer = open ? 'open' : '';
    $('#menu').setAttribute('aria-expanded', String(open));
  });
  $('#scrim').addEventListener('click', closeDrawer);
  $('#computer-back').addEventListener('click', () => { document.body.dataset.panel = 'chat'; });
  $('#toggle-computer').addEventListener('click', () => { document.body.dataset.panel = 'computer'; });
  $('#show-usage').addEventListener('click', () => showView(document.body.dataset.view === 'usage' ? 'chat' : 'usage'));
  $('#new-chat').addEventListener('click', () => { showView('chat'); document.body.dataset.panel = 'chat'; newChat(); });
  $('#sessions').addEventListener('click', ev => {
    if (ev.target.closest('button')) { showView('chat'); document.body.dataset.panel = 'chat'; }
  });
}

function setupKeys() {
  document.addEventListener('keydown', ev => {
    if (ev.key !== 'Escape' || ev.defaultPrevented) return;
    if ($('#lightbox').open) return;  // the dialog closes itself
    if (document.body.dataset.drawer === 'open') { closeDrawer(); return; }
    if (isLive()) { ev.preventDefault(); stopRun(null); }
  });
}

async function start() {
  setupToken(() => { loadConfig().then(showConfig); refresh(); });
  setupApprovals(text => note(text, true), () => refresh());
  setupQuestions(text => note(text, true), () => refresh());
  setupChat();
  setupAttachments((text, bad) => note(text, bad), () => files.reload());
  setupPane();
  setupUsage();
  setupLayout();
  setupKeys();
  showView('chat');
  await Promise.all([loadConfig().then(showConfig), refresh()]);
  document.documentElement.dataset.ready = '1';
}

function showConfig() {
  $('#model-name').textContent = config.model ? config.model : '';
  $('#currency').textContent = config.currency.code;
}

start();
