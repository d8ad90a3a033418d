// GET /v1/events read with fetch streaming (EventSource cannot send Authorization).

import { authHeader } from './api.js';

/** Splits a text/event-stream into events; feed() it decoded text, it calls onEvent({id, event, data}) (id: that event's own, or null). */
export class SSEParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buf = '';
    this.reset();
  }
  reset() { this.data = []; this.event = ''; this.id = null; }
  feed(text) {
    this.buf += text;
    const re = /\r\n|\r|\n/g;
    let start = 0;
    let m;
    while ((m = re.exec(this.buf))) {
      // A lone \r at the very end may be the first half of \r\n: wait for more.
      if (m[0] === '\r' && m.index === this.buf.length - 1) break;
      this.line(this.buf.slice(start, m.index));
      start = re.lastIndex;
    }
    this.buf = this.buf.slice(start);
  }
  line(line) {
    if (line === '') {
      if (this.data.length) this.onEvent({ id: this.id, event: this.event || 'message', data: this.data.join('\n') });
      this.reset();
      return;
    }
    if (line[0] === ':') return; // comment (keep-alive)
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? '' : line.slice(i + 1);
    if (value[0] === ' ') value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
    else if (field === 'id' && !value.includes('\0')) this.id = value;
  }
}

/**
 * Keeps one stream open, reconnecting with backoff (1 s doubling to 30 s).
 * handlers: onEvent(evt), onOpen(isReconnect), onState('connecting'|'live'|'waiting', seconds?), onUnauthorized(message)
 */
export function openStream(handlers) {
  const ctrl = new AbortController();
  let backoff = 1;
  let timer = 0;
  let opened = false;
  let stopped = false;

  async function connect() {
    handlers.onState('connecting');
    let wait = 0;
    let openedAt = 0;
    try {
      const res = await fetch('/v1/events', {
        headers: { Accept: 'text/event-stream', ...authHeader() },
        cache: 'no-store',
        signal: ctrl.signal,
      });
      if (res.status === 401) {
        let msg = 'Your key was refused.';
        try { msg = (await res.json()).detail || msg; } catch { /* not JSON */ }
        stopped = true;
        handlers.onUnauthorized(msg);
        return;
      }
      if (!res.ok || !res.body) {
        wait = Number(res.headers.get('Retry-After')) || 0;
        await res.body?.cancel();
      } else {
        openedAt = Date.now();
        handlers.onState('live');
        handlers.onOpen(opened);
        opened = true;
        const parser = new SSEParser(handlers.onEvent);
        const reader = res.body.getReader();
        const dec = new TextDecoder();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          parser.feed(dec.decode(value, { stream: true }));
        }
      }
    } catch (e) {
      if (stopped || e.name === 'AbortError') return;
    }
    if (stopped) return;
    // A stream that stayed up a while starts the backoff over.
    if (openedAt && Date.now() - openedAt > 30000) backoff = 1;
    const delay = Math.max(backoff, wait);
    backoff = Math.min(backoff * 2, 30);
    handlers.onState('waiting', delay);
    timer = setTimeout(connect, delay * 1000);
  }

  connect();
  return () => { stopped = true; clearTimeout(timer); ctrl.abort(); };
}
