// HTML from escaped strings: `html` escapes every interpolated value unless it is itself the
// result of `html` (or `raw`), so data can never become markup.

class Html {
  constructor(s) { this.s = s; }
  toString() { return this.s; }
}

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/// Markup already escaped (a string an `html` call produced).
export const raw = (s) => new Html(s);

export function esc(value) {
  return String(value).replace(/[&<>"']/g, (c) => ESC[c]);
}

function part(v) {
  if (v instanceof Html) return v.s;
  if (Array.isArray(v)) return v.map(part).join('');
  if (v === null || v === undefined || v === false) return '';
  return esc(v);
}

export function html(strings, ...values) {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += part(values[i]) + strings[i + 1];
  return new Html(out);
}

/// Replaces an element's children with `markup` (one parse, one layout).
export function put(el, markup) {
  el.innerHTML = part(markup);
}

export function ago(ms) {
  if (!ms) return '';
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function duration(from, to) {
  if (!from) return '';
  const s = Math.max(0, Math.round(((to || Date.now()) - from) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

export function when(ms) {
  return ms ? new Date(ms).toLocaleString() : '';
}

export function mib(n) {
  return n >= 1024 ? `${(n / 1024).toFixed(n >= 10240 ? 0 : 1)} GiB` : `${n} MiB`;
}

export const state = (s) => html`<span class="state s-${s}">${s}</span>`;

/// The reading inside a GPU's latest sample: utilisation and memory in percent, or null.
export function reading(gpu) {
  const s = gpu.sample && gpu.sample.sample;
  if (!s) return null;
  const total = s.memory_used_bytes + s.memory_free_bytes + (s.memory_reserved_bytes || 0);
  return {
    util: s.gpu_util_percent ?? null,
    mem: total ? (100 * s.memory_used_bytes) / total : null,
    usedMib: Math.round(s.memory_used_bytes / 1048576),
    temp: s.gpu_temp_celsius,
    power: s.power_watts,
  };
}

export const findings = (gpu) => (gpu.sample && gpu.sample.findings) || [];

export const pct = (v) => (v === null || v === undefined ? '–' : `${Math.round(v)}%`);
