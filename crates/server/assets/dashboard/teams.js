// Teams and their queues: the guarantee (the team's quota), GPUs in use and borrowed beyond the
// guarantee, as the scheduler counts them (`/v1/queues`), drawn as one bar per team; the
// decayed GPU-hours fair share orders by; the queue; and GPU-hours allocated over the last
// 7 days (`/v1/usage`, from the allocation history). A pushed job change reloads the page.

import { json } from './api.js';
import { html, put } from './view.js';

export function mount(main) {
  put(main, html`<div class="bar"><h1>Teams and queues</h1>
    <span class="legend"><span class="key q-guarantee"></span>guarantee <span class="key q-used"></span>in use
    <span class="key q-borrowed"></span>borrowed</span></div><div id="teams-body"></div>`);
}

export async function load() {
  const [teams, queues, usage] = await Promise.all([json('/v1/teams'), json('/v1/queues'), json('/v1/usage?by=team')]);
  const hours = new Map(usage.value.map((u) => [u.team, u.gpu_hours]));
  return { teams: teams.value, queues: new Map(queues.value.map((q) => [q.team, q])), hours };
}

export function live(ctx, name) {
  return name === 'jobs' ? 'reload' : null;
}

const num = (v) => (Number.isInteger(v) ? String(v) : v.toFixed(1));

/// Guarantee (light), use within it (blue) and borrowed use (amber) on a scale of the most
/// the team may hold; a tick marks the guarantee.
function bar(q) {
  const scale = Math.max(q.max_gpus, q.used_gpus, q.guaranteed_gpus, 1);
  const x = (v) => ((100 * v) / scale).toFixed(2);
  const own = Math.min(q.used_gpus, q.guaranteed_gpus);
  return html`<svg class="quota" viewBox="0 0 100 10" preserveAspectRatio="none" role="img"
    aria-label="${`${num(q.used_gpus)} of ${q.guaranteed_gpus} guaranteed GPUs in use, ${num(q.borrowed_gpus)} borrowed`}">
    <rect class="q-guarantee" x="0" y="0" width="${x(q.guaranteed_gpus)}" height="10"></rect>
    <rect class="q-used" x="0" y="2" width="${x(own)}" height="6"></rect>
    <rect class="q-borrowed" x="${x(q.guaranteed_gpus)}" y="2" width="${x(q.borrowed_gpus)}" height="6"></rect>
    ${q.guaranteed_gpus ? html`<line class="q-mark" x1="${x(q.guaranteed_gpus)}" x2="${x(q.guaranteed_gpus)}" y1="0" y2="10"></line>` : ''}
  </svg>`;
}

export function render({ teams, queues, hours }) {
  const rows = teams.map((t) => {
    const q = queues.get(t.name);
    const link = (state) => `#/jobs?team=${encodeURIComponent(t.name)}${state ? `&state=${state}` : ''}`;
    return html`<tr data-team="${t.name}"><td><a href="${link('')}">${t.name}</a></td>
      <td class="num">${t.gpu_quota ?? '–'}</td>
      <td class="num used">${q ? num(q.used_gpus) : '–'}</td>
      <td class="num borrowed">${q ? num(q.borrowed_gpus) : '–'}</td>
      <td>${q ? bar(q) : ''} <span class="muted">${q ? `max ${q.max_gpus}` : ''}</span></td>
      <td class="num">${q ? q.decayed_gpu_hours.toFixed(2) : '–'}</td>
      <td class="num"><a href="${link('running')}">${t.active}</a></td>
      <td class="num"><a href="${link('pending')}">${t.pending}</a></td>
      <td class="num">${(hours.get(t.name) || 0).toFixed(2)}</td></tr>`;
  });
  put(document.getElementById('teams-body'), teams.length
    ? html`<table class="grid"><thead><tr><th>Team</th><th class="num">Guarantee (GPUs)</th><th class="num">In use</th>
      <th class="num">Borrowed</th><th>Guarantee, use and borrowing</th><th class="num">Fair-share GPU-hours (decayed)</th>
      <th class="num">Active jobs</th><th class="num">Pending jobs</th><th class="num">GPU-hours, 7 days</th></tr></thead><tbody>${rows}</tbody></table>`
    : html`<p class="empty">No teams yet.</p>`);
}
