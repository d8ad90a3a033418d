// The queue card: counts, pause/resume for admin keys, debounced refresh after job events.

import { api } from './api.js';
import { $, announce } from './ui.js';

let paused = false;
let admin = false;
let last = 0;
let timer = 0;
// Answers can arrive out of order: each request takes a ticket, and an answer older than the one shown is dropped.
let tickets = 0;
let shown = 0;
let acting = false;

function show(ticket, q) {
  if (ticket < shown) return;
  shown = ticket;
  render(q);
}

function render(q) {
  paused = q.paused;
  const s = $('q-state');
  s.textContent = q.paused ? 'Paused' : 'Active';
  s.dataset.paused = String(q.paused);
  for (const k of ['running', 'queued', 'scheduled', 'workers']) $('q-' + k).textContent = String(q[k]);
  const b = $('q-toggle');
  b.textContent = q.paused ? 'Resume queue' : 'Pause queue';
  b.dataset.action = q.paused ? 'resume' : 'pause';
  b.hidden = !admin;
}

export async function loadQueue() {
  // A pause or resume in flight answers with the queue itself: read it after that.
  if (acting) { last = Date.now(); queueChanged(); return; }
  last = Date.now();
  const ticket = ++tickets;
  try {
    show(ticket, await api('GET', '/v1/queue'));
  } catch (e) {
    if (e.status !== 401) announce('Could not read the queue: ' + e.message);
  }
}

/** Refreshes the counts, at most once a second, after job events. */
export function queueChanged() {
  if (timer) return;
  timer = setTimeout(() => { timer = 0; loadQueue(); }, Math.max(0, 1000 - (Date.now() - last)));
}

export function stopQueue() { clearTimeout(timer); timer = 0; }

export function initQueue(isAdmin) {
  admin = isAdmin;
  $('q-toggle').hidden = !admin;
}

$('q-toggle').addEventListener('click', async (ev) => {
  const b = ev.currentTarget;
  const action = paused ? 'resume' : 'pause';
  b.disabled = true;
  acting = true;
  const ticket = ++tickets;
  try {
    const q = await api('POST', '/v1/queue/' + action);
    show(ticket, q);
    last = Date.now();
    announce(q.paused ? 'Queue paused: no new jobs start.' : 'Queue resumed.');
  } catch (e) {
    if (e.status !== 401) announce(`Could not ${action} the queue: ${e.message}`);
  } finally {
    acting = false;
    b.disabled = false;
  }
});
