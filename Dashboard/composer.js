// The composer: pick or drop files, upload each with a progress bar, then create the post.

import { api, uploadMedia, uploadResumable, uuid } from './api.js';
import { $, el, bytes, setProgress, announce, show, shortId } from './ui.js';
import { upsertJob, rememberPost } from './jobs.js';

// Larger files go through tus, which resumes after a dropped connection (the CLI's --resumable-above default).
const RESUMABLE_ABOVE = 8 * 1024 * 1024;

let files = []; // {file, mediaId, row, bar, note}
let idemKey = ''; // kept while the same post is retried, so a retry cannot publish twice
let publishing = false;
const form = $('composer');
const input = $('files');
const drop = $('drop');
const listEl = $('file-list');
const errBox = $('c-error');

function changed() { idemKey = ''; show(errBox, ''); }

function addFiles(chosen) {
  for (const file of chosen) {
    const sid = files.length + 1;
    const bar = el('progress', { max: file.size || 1, value: 0, 'aria-label': `Upload of ${file.name}` });
    const note = el('span', { className: 'note', text: bytes(file.size) });
    const remove = el('button', { type: 'button', className: 'quiet small', 'aria-label': `Remove ${file.name}`, text: 'Remove' });
    const row = el('li', { 'data-file': String(sid) }, el('span', { className: 'name', text: file.name }), note, bar, remove);
    const entry = { file, mediaId: '', row, bar, note };
    remove.addEventListener('click', () => {
      if (publishing) return;
      files = files.filter((f) => f !== entry);
      row.remove();
      changed();
      input.focus();
    });
    files.push(entry);
    listEl.append(row);
  }
  if (chosen.length) { changed(); announce(`${files.length} file${files.length === 1 ? '' : 's'} chosen.`); }
}

input.addEventListener('change', () => { addFiles([...input.files]); input.value = ''; });
for (const t of ['dragenter', 'dragover']) {
  drop.addEventListener(t, (e) => { e.preventDefault(); drop.classList.add('over'); });
}
// A file dropped beside the drop zone must not replace the page.
for (const t of ['dragover', 'drop']) document.addEventListener(t, (e) => e.preventDefault());
drop.addEventListener('dragleave', () => drop.classList.remove('over'));
drop.addEventListener('drop', (e) => {
  e.preventDefault();
  drop.classList.remove('over');
  addFiles([...(e.dataTransfer?.files || [])]);
});

const text = $('text');
text.addEventListener('input', () => { $('text-count').textContent = `${text.value.length} / 5000 characters`; changed(); });
$('when').addEventListener('change', changed);
$('priority').addEventListener('change', changed);

export function resetComposer() {
  files = [];
  idemKey = '';
  listEl.replaceChildren();
  form.reset();
  $('text-count').textContent = '0 / 5000 characters';
  show(errBox, '');
}

function fail(msg) {
  show(errBox, msg);
  announce('Not published: ' + msg);
}

form.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  if (publishing) return;
  show(errBox, '');
  const body = { text: text.value, media_ids: [], priority: $('priority').value };
  if (!body.text.trim() && !files.length) { fail('Write some text or choose at least one file.'); text.focus(); return; }
  const w = $('when').value;
  if (w) {
    const d = new Date(w);
    if (Number.isNaN(d.getTime())) { fail('The schedule is not a valid time.'); $('when').focus(); return; }
    body.scheduled_at = d.toISOString();
  }
  publishing = true;
  const btn = $('publish');
  btn.setAttribute('aria-disabled', 'true');
  btn.textContent = 'Publishing…';
  try {
    for (const f of files) {
      if (f.mediaId) continue;
      f.row.dataset.state = 'uploading';
      announce(`Uploading ${f.file.name}…`);
      try {
        const progress = (loaded, total) => {
          setProgress(f.bar, loaded, total || f.file.size);
          f.note.textContent = `${bytes(loaded)} of ${bytes(total || f.file.size)}`;
        };
        const waiting = (reason) => {
          const msg = `${reason}, resuming…`;
          if (f.note.textContent !== msg) announce(`${f.file.name}: ${msg}`);
          f.note.textContent = msg;
        };
        const media = f.file.size > RESUMABLE_ABOVE ? await uploadResumable(f.file, progress, waiting) : await uploadMedia(f.file, progress);
        f.mediaId = media.id;
        f.row.dataset.state = 'uploaded';
        f.note.textContent = `${bytes(f.file.size)} uploaded`;
      } catch (e) {
        f.row.dataset.state = 'failed';
        f.note.textContent = 'failed';
        if (e.status !== 401) fail(`${f.file.name}: ${e.message}`);
        return;
      }
    }
    body.media_ids = files.map((f) => f.mediaId);
    if (!idemKey) idemKey = uuid();
    let res;
    try {
      res = await api('POST', '/v1/posts', { body, headers: { 'Idempotency-Key': idemKey } });
    } catch (e) {
      if (e.status !== 401) fail(e.message);
      return;
    }
    rememberPost(res.post);
    upsertJob(res.job, { quiet: true });
    resetComposer();
    announce(`Published: job ${shortId(res.job.id)} is ${res.job.state}.`);
  } finally {
    publishing = false;
    btn.removeAttribute('aria-disabled');
    btn.textContent = 'Publish';
  }
});
