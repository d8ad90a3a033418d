// Small DOM helpers shared by the views.

export const $ = (id) => document.getElementById(id);

/** Creates an element: el('p', {className: 'x', text: 'y'}, child, …). */
export function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'text') e.textContent = v;
    else if (k === 'className' || k === 'hidden' || k === 'type' || k === 'max' || k === 'value') e[k] = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

/** The distinctive end of a time-ordered id (its start is a timestamp shared by neighbours). */
export const shortId = (id) => String(id).replace(/-/g, '').slice(-8);

export function bytes(n) {
  if (!Number.isFinite(n)) return '';
  const u = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 1 : 0) : String(n)) + ' ' + u[i];
}

const fmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });
export const when = (iso) => (iso ? fmt.format(new Date(iso)) : '');

/** Sets a <progress>: a number 0…max, or null for indeterminate. */
export function setProgress(p, value, max) {
  p.max = max > 0 ? max : 1;
  if (value == null) p.removeAttribute('value');
  else p.value = Math.min(value, p.max);
}

/** The polite live region: shows and announces the latest message. */
export function announce(msg) {
  const box = $('status');
  box.replaceChildren(el('p', { text: msg }));
}

/** Shows a message in an element, or hides it when msg is empty. */
export function show(box, msg) {
  box.textContent = msg || '';
  box.hidden = !msg;
}
