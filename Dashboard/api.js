// Talking to Herald: the key, fetch with Authorization, problem details, XHR uploads.

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

/** Uploads one file as the raw body of POST /v1/media; onProgress(loaded, total). Resolves to the media object. */
export function uploadMedia(file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', '/v1/media');
    xhr.setRequestHeader('Authorization', 'Bearer ' + getKey());
    xhr.setRequestHeader('Content-Type', file.type || 'application/octet-stream');
    xhr.setRequestHeader('Accept', 'application/json');
    xhr.upload.onprogress = (e) => onProgress(e.loaded, e.lengthComputable ? e.total : file.size);
    xhr.onload = () => {
      const p = parseProblem(xhr.responseText);
      if (xhr.status >= 200 && xhr.status < 300 && p) { onProgress(file.size, file.size); resolve(p); return; }
      const err = new ApiError(xhr.status, p, `${xhr.status} ${xhr.statusText}`.trim());
      if (xhr.status === 401) onUnauthorized(err.message);
      reject(err);
    };
    xhr.onerror = () => reject(new ApiError(0, null, 'The upload was interrupted.'));
    xhr.send(file);
  });
}

/** A UUID for Idempotency-Key (crypto.randomUUID needs a secure context; fall back otherwise). */
export function uuid() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40; b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
