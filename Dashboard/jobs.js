// The job list: loaded once, then kept up to date from job events; cancel and re-publish.

import { api } from './api.js';
import { $, el, shortId, bytes, when, setProgress, announce, show } from './ui.js';
import { queueChanged } from './queue.js';

const LABEL = { queued: 'Queued', scheduled: 'Scheduled', running: 'Running', succeeded: 'Succeeded', failed: 'Failed', cancelled: 'Cancelled' };
const UPLOAD = { pending: 'waiting', uploading: 'uploading', uploaded: 'uploaded', failed: 'failed', cancelled: 'cancelled' };

const jobs = new Map(); // id -> {job, evId, li, parts}
const posts = new Map(); // post id -> Post
const latest = new Map(); // post id -> newest job {id, created_at}
const fetching = new Set();
const list = $('job-list');

export function resetJobs() {
  jobs.clear(); posts.clear(); latest.clear(); fetching.clear();
  list.replaceChildren();
  show($('j-error'), '');
}

export async function loadJobs() {
  try {
    const [j, p] = await Promise.all([api('GET', '/v1/jobs?limit=50'), api('GET', '/v1/posts?limit=50')]);
    for (const post of p.data) posts.set(post.id, post);
    for (const job of j.data) upsertJob(job, { quiet: true, initial: true });
    show($('j-error'), '');
  } catch (e) {
    if (e.status !== 401) show($('j-error'), 'Could not load the jobs: ' + e.message);
  }
  $('j-empty').hidden = jobs.size > 0;
}

export function rememberPost(post) {
  posts.set(post.id, post);
  for (const rec of jobs.values()) if (rec.job.post_id === post.id) paintText(rec);
}

async function fetchPost(id) {
  if (fetching.has(id)) return;
  fetching.add(id);
  try {
    rememberPost(await api('GET', '/v1/posts/' + encodeURIComponent(id)));
  } catch { /* the job still shows, without its text */ }
}

/** Inserts or updates a job. evId: the SSE id (stale events are ignored); quiet: no announcement; initial: from the first list. */
export function upsertJob(job, { evId, quiet = false, initial = false } = {}) {
  let rec = jobs.get(job.id);
  const isNew = !rec;
  if (rec) {
    if (rec.job.done && !job.done) return; // a late answer never undoes an end
    if (evId != null && rec.evId != null && Number(evId) < Number(rec.evId)) return;
    // An API answer may be older than the events already seen: apply it only if it is further along.
    if (evId == null && rec.evId != null && rank(job) <= rank(rec.job)) return;
  } else {
    rec = { job, evId: null, ...build(job) };
    jobs.set(job.id, rec);
    place(rec);
    $('j-empty').hidden = true;
  }
  const before = isNew ? null : rec.job.state;
  rec.job = job;
  if (evId != null) rec.evId = evId;
  const lp = latest.get(job.post_id);
  if (!lp || lp.created_at < job.created_at || lp.id === job.id) {
    latest.set(job.post_id, { id: job.id, created_at: job.created_at });
    if (lp && lp.id !== job.id) { const old = jobs.get(lp.id); if (old) paint(old); }
  }
  paint(rec);
  if (!posts.has(job.post_id)) fetchPost(job.post_id);
  if (before !== job.state) {
    if (!quiet) {
      let msg = `Job ${shortId(job.id)}: ${LABEL[job.state] || job.state}.`;
      if (job.state === 'failed' && job.error) msg += ' ' + job.error.message;
      announce(msg);
    }
    if (!initial) queueChanged();
  }
}

const rank = (j) => (j.done ? 4 : j.state === 'running' ? 2 : 0) + (j.cancel_requested ? 1 : 0);

function build(job) {
  const sid = shortId(job.id);
  const badge = el('span', { className: 'badge' });
  const meta = el('span', { className: 'meta' });
  const text = el('p', { className: 'text' });
  const overall = el('progress', { 'aria-label': `Overall progress of job ${sid}` });
  const pct = el('span', { className: 'pct' });
  const uploads = el('ul', { className: 'uploads', 'aria-label': `Uploads of job ${sid}` });
  const err = el('p', { className: 'job-error', hidden: true });
  const cancel = el('button', { type: 'button', className: 'danger', 'data-action': 'cancel', 'aria-label': `Cancel job ${sid}`, text: 'Cancel' });
  const repub = el('button', { type: 'button', 'data-action': 'republish', 'aria-label': `Re-publish post of job ${sid}`, text: 'Re-publish' });
  const li = el('li', { className: 'job', 'data-job-id': job.id, 'data-post-id': job.post_id, tabindex: '-1' },
    el('div', { className: 'job-head' }, badge, el('span', { className: 'jid', text: 'Job ' + sid }), meta),
    text,
    el('div', { className: 'overall' }, overall, pct),
    uploads, err,
    el('div', { className: 'actions' }, cancel, repub));
  return { li, parts: { badge, meta, text, overall, pct, uploads, err, cancel, repub } };
}

function place(rec) {
  const t = rec.job.created_at;
  for (const li of list.children) {
    const other = jobs.get(li.dataset.jobId);
    if (other && other.job.created_at < t) { list.insertBefore(rec.li, li); return; }
  }
  list.append(rec.li);
}

function paintText(rec) {
  const post = posts.get(rec.job.post_id);
  const t = rec.parts.text;
  if (!post) { t.textContent = '…'; t.classList.add('muted'); return; }
  t.textContent = post.text || `(no text, ${post.media.length} media)`;
  t.classList.toggle('muted', !post.text);
}

function hideButton(rec, b, hide) {
  if (hide && document.activeElement === b) rec.li.focus();
  b.hidden = hide;
}

function paint(rec) {
  const { job, li, parts: p } = rec;
  li.dataset.state = job.state;
  p.badge.className = 'badge s-' + job.state;
  p.badge.textContent = (LABEL[job.state] || job.state) + (job.cancel_requested && !job.done ? ' (cancelling)' : '');
  const bits = [job.priority + ' priority', 'created ' + when(job.created_at)];
  if (job.state === 'scheduled') bits.push('runs ' + when(job.run_at));
  if (job.attempt > 1) bits.push('attempt ' + job.attempt);
  p.meta.textContent = bits.join(' · ');
  paintText(rec);

  const pr = job.progress || {};
  const pct = job.state === 'succeeded' ? 100 : pr.percent || 0;
  setProgress(p.overall, pct, 100);
  p.pct.textContent = pct + ' %';

  const ups = job.uploads || [];
  while (p.uploads.children.length > ups.length) p.uploads.lastChild.remove();
  ups.forEach((u, i) => {
    let row = p.uploads.children[i];
    if (!row) {
      row = el('li', {}, el('span'), el('progress', { 'aria-label': `Media ${i + 1} of job ${shortId(job.id)}` }));
      p.uploads.append(row);
    }
    const [label, bar] = row.children;
    const sized = Number.isFinite(u.size) && u.size > 0;
    let txt = `Media ${i + 1}: ${UPLOAD[u.state] || u.state}`;
    if (sized) txt += ` · ${bytes(u.state === 'uploaded' ? u.size : u.bytes_sent || 0)} of ${bytes(u.size)}`;
    if (u.attempts > 1) txt += ` · attempt ${u.attempts}`;
    label.textContent = txt;
    row.dataset.state = u.state;
    if (u.state === 'uploaded') setProgress(bar, 1, 1);
    else if (sized) setProgress(bar, u.bytes_sent || 0, u.size);
    else setProgress(bar, u.state === 'uploading' ? null : 0, 1);
  });

  const showErr = job.error && (job.state === 'failed' || job.state === 'cancelled');
  show(p.err, showErr ? job.error.message : '');
  p.err.classList.toggle('muted', job.state === 'cancelled');

  hideButton(rec, p.cancel, job.done);
  p.cancel.setAttribute('aria-disabled', String(!!job.cancel_requested));
  const isLatest = latest.get(job.post_id)?.id === job.id;
  hideButton(rec, p.repub, !(isLatest && (job.state === 'failed' || job.state === 'cancelled')));
}

const busy = new Set();

list.addEventListener('click', async (ev) => {
  const b = ev.target.closest('button[data-action]');
  if (!b) return;
  const rec = jobs.get(b.closest('li.job').dataset.jobId);
  if (!rec || busy.has(b) || b.getAttribute('aria-disabled') === 'true') return;
  const sid = shortId(rec.job.id);
  busy.add(b);
  b.setAttribute('aria-busy', 'true');
  try {
    if (b.dataset.action === 'cancel') {
      upsertJob(await api('POST', `/v1/jobs/${encodeURIComponent(rec.job.id)}/cancel`)); // announces an end
      if (!rec.job.done) announce(`Cancelling job ${sid}…`);
    } else {
      const res = await api('POST', `/v1/posts/${encodeURIComponent(rec.job.post_id)}/publish`);
      rememberPost(res.post);
      upsertJob(res.job, { quiet: true });
      announce(`Re-published: new job ${shortId(res.job.id)} is ${LABEL[res.job.state] || res.job.state}.`);
      jobs.get(res.job.id)?.li.focus();
    }
  } catch (e) {
    if (e.status !== 401) announce(`Job ${sid}: ${e.message}`);
  } finally {
    busy.delete(b);
    b.removeAttribute('aria-busy');
  }
});
