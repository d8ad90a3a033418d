// Entry point: the key prompt, then the dashboard (queue, jobs, composer) fed by one event stream.

import { api, getKey, setKey, clearKey, setUnauthorizedHandler } from './api.js';
import { openStream } from './events.js';
import { $, announce, show } from './ui.js';
import { initQueue, loadQueue, queueChanged, stopQueue } from './queue.js';
import { loadJobs, resetJobs, upsertJob } from './jobs.js';
import { resetComposer } from './composer.js';

let closeStream = null;
let session = 0;

function setConn(state, secs) {
  const c = $('conn');
  c.hidden = false;
  c.dataset.state = state;
  $('conn-text').textContent = state === 'live' ? 'Live' : state === 'waiting' ? `Reconnecting in ${secs} s` : 'Connecting…';
}

function signOut(message) {
  session++;
  if (closeStream) { closeStream(); closeStream = null; }
  stopQueue();
  clearKey();
  resetJobs();
  resetComposer();
  $('dash').hidden = true;
  $('signout').hidden = true;
  $('conn').hidden = true;
  $('signin').hidden = false;
  show($('key-msg'), message || '');
  $('key-msg').classList.toggle('error', !!message);
  const k = $('key');
  k.value = '';
  k.focus();
  if (message) announce(message);
}

async function start() {
  const mine = ++session;
  // Once per sign-in: an admin key may list keys (200); any other valid key gets 403.
  let admin = false;
  try {
    await api('GET', '/v1/keys?limit=1', { quiet401: true });
    admin = true;
  } catch (e) {
    if (e.status === 401) { signOut('That key was refused: ' + e.message); return; }
    if (e.status !== 403) {
      $('signin').hidden = false;
      show($('key-msg'), 'Cannot sign in: ' + e.message);
      $('key-msg').classList.add('error');
      return;
    }
  }
  if (mine !== session) return;
  $('signin').hidden = true;
  $('dash').hidden = false;
  $('signout').hidden = false;
  initQueue(admin);
  $('q-title').focus();
  announce(admin ? 'Signed in with an admin key.' : 'Signed in.');
  await Promise.all([loadQueue(), loadJobs()]);
  if (mine !== session) return;
  closeStream = openStream({
    onEvent(e) { if (e.event === 'job') { try { upsertJob(JSON.parse(e.data), { evId: e.id }); } catch { /* malformed event */ } } },
    onOpen(reconnect) { if (reconnect) { loadJobs(); queueChanged(); } },
    onState: setConn,
    onUnauthorized: (msg) => signOut('Your key was refused: ' + msg),
  });
}

setUnauthorizedHandler((msg) => signOut('Your key was refused: ' + msg));

$('key-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const k = $('key').value.trim();
  if (!k) {
    show($('key-msg'), 'Enter an API key.');
    $('key-msg').classList.add('error');
    $('key').focus();
    return;
  }
  setKey(k);
  show($('key-msg'), '');
  start();
});

$('signout').addEventListener('click', () => { signOut(''); announce('Signed out.'); });

if (getKey()) start();
else { $('signin').hidden = false; $('key').focus(); }
