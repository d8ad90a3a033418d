// Talking to Herald: the key, fetch with Authorization, problem details, XHR uploads (tus for large files).

const STORE = 'herald.key';
let onUnauthorized = () => {};

export const getKey = () => sessionStorage.getItem(STORE) || '';
export const setKey = (k) => sessionStorage.setItem(STORE, k);
export const clearKey = () => sessionStorage.removeItem(STORE);
export const setUnauthorizedHandler = (fn) => { onUnauthorized = fn; };
export const authHeader = () => ({ Authorization: 'Bearer ' + getKey() });

/** An HTTP error carrying the RFC 9457 problem, if any. */
export class ApiError extends Error {
  constructor(status, problem, fallback) {
    super(describe(problem, fallback || 'HTTP ' + status));
    this.status = status;
    this.problem = problem;
  }
}

/** One readable sentence from a problem: detail, then each errors[].detail. */
export function describe(problem, fallback) {
  if (!problem || typeof problem !== 'object') return fallback;
  const parts = [problem.detail || problem.title || fallback];
  if (Array.isArray(problem.errors)) {
    for (const e of problem.errors) if (e && e.detail) parts.push(e.pointer ? `${e.detail} (${e.pointer})` : e.detail);
  }
  return parts.join(' — ');
}

function parseProblem(text) {
  try { return JSON.parse(text); } catch { return null; }
}

/** A JSON call to /v1. Throws ApiError; a 401 also signs out (unless quiet401). */
export async function api(method, path, { body, headers = {}, quiet401 = false } = {}) {
  const h = { Accept: 'application/json', ...authHeader(), ...headers };
  if (body !== undefined) h['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store' });
  } catch {
    throw new ApiError(0, null, 'The server cannot be reached.');
  }
  const text = await res.text();
  if (!res.ok) {
    const err = new ApiError(res.status, parseProblem(text), `${res.status} ${res.statusText}`.trim());
    if (res.status === 401 && !quiet401) onUnauthorized(err.message);
    throw err;
  }
  return text ? JSON.parse(text) : null;
}

/** Sends one XHR with the key; resolves to it once answered, whatever the status; rejects with ApiError(0) when the connection fails. */
function send(method, path, headers, body, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open(method, path);
    for (const [k, v] of Object.entries({ Accept: 'application/json', ...authHeader(), ...headers })) xhr.setRequestHeader(k, v);
    if (onProgress) xhr.upload.onprogress = (e) => onProgress(e.loaded);
    xhr.onload = () => resolve(xhr);
    xhr.onerror = () => reject(new ApiError(0, null, 'The upload was interrupted.'));
    xhr.send(body);
  });
}

/** The ApiError of an answered XHR; a 401 also signs out. */
function failure(xhr) {
  const err = new ApiError(xhr.status, parseProblem(xhr.responseText), `${xhr.status} ${xhr.statusText}`.trim());
  if (xhr.status === 401) onUnauthorized(err.message);
  return err;
}

/** Uploads one file as the raw body of POST /v1/media; onProgress(loaded, total). Resolves to the media object. */
export async function uploadMedia(file, onProgress) {
  const xhr = await send('POST', '/v1/media', { 'Content-Type': file.type || 'application/octet-stream' }, file, (n) => onProgress(n, file.size));
  const media = parseProblem(xhr.responseText);
  if (xhr.status < 200 || xhr.status >= 300 || !media) throw failure(xhr);
  onProgress(file.size, file.size);
  return media;
}

const TUS = { 'Tus-Resumable': '1.0.0' };
const CHUNK = 8 * 1024 * 1024; // bytes a PATCH sends, as the CLI
const PATIENCE = 120000; // ms without progress before giving up, as the CLI

const offsetOf = (xhr) => parseInt(xhr.getResponseHeader('Upload-Offset'), 10);

/**
 * Uploads one file through tus (/v1/uploads) in PATCHes of 8 MiB, resuming by itself as the CLI does; resolves to the media object.
 * After a dropped connection, a 5xx, 409 or 423 it calls onWait(reason), waits (0.5 s doubling to 5 s), asks how far
 * the bytes reach (HEAD) and sends the rest. onProgress(loaded, total).
 */
export async function uploadResumable(file, onProgress, onWait) {
  const meta = 'filetype ' + btoa(file.type || 'application/octet-stream');
  const created = await send('POST', '/v1/uploads', { ...TUS, 'Upload-Length': String(file.size), 'Upload-Metadata': meta });
  const location = created.getResponseHeader('Location');
  if (created.status !== 201 || !location) throw failure(created);
  // The upload's id is its media's id: the Location's last segment.
  const id = location.split('/').pop();
  const path = '/v1/uploads/' + encodeURIComponent(id);
  // The bar moves on with each PATCH, but never back below what the server last said it holds.
  let shown = 0;
  const report = (n, server) => { if (server || n > shown) { shown = n; onProgress(n, file.size); } };
  let offset = 0;
  let retry = 500;
  let lastProgress = Date.now();
  while (offset < file.size) {
    const start = offset;
    let reason = 'connection lost';
    try {
      const headers = { ...TUS, 'Upload-Offset': String(start), 'Content-Type': 'application/offset+octet-stream' };
      const xhr = await send('PATCH', path, headers, file.slice(start, start + CHUNK), (n) => report(start + n));
      if (xhr.status === 204 && offsetOf(xhr) >= 0) {
        offset = offsetOf(xhr);
        report(offset, true);
        retry = 500;
        lastProgress = Date.now();
        continue;
      }
      // 409: the offset moved under this page (a PATCH it gave up on was counted); 423: one still holds the upload.
      if (xhr.status < 500 && xhr.status !== 409 && xhr.status !== 423) throw failure(xhr);
      reason = `the server answered ${xhr.status}`;
    } catch (e) {
      if (e.status !== 0) throw e;
    }
    // Away, or answered what a moment may mend: wait, then ask how far the bytes reach.
    if (Date.now() - lastProgress >= PATIENCE) throw new ApiError(0, null, 'The upload made no progress for 2 minutes.');
    onWait(reason);
    await new Promise((r) => setTimeout(r, retry));
    retry = Math.min(retry * 2, 5000);
    const head = await send('HEAD', path, TUS).catch(() => null);
    if (head && head.status === 200 && offsetOf(head) >= 0) { offset = offsetOf(head); report(offset, true); }
  }
  return api('GET', '/v1/media/' + encodeURIComponent(id));
}

/** A UUID for Idempotency-Key (crypto.randomUUID needs a secure context; fall back otherwise). */
export function uuid() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40; b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
