// Teams: quota (the guarantee), GPUs in use by active jobs, the queue, and GPU-hours allocated
// over the last 7 days (`/v1/usage`, from the allocation history).

import { json } from './api.js';
import { html, put } from './view.js';

export function mount(main) {
  put(main, html`<div class="bar"><h1>Teams and queues</h1></div><div id="teams-body"></div>`);
}

export async function load() {
  const [teams, active, usage] = await Promise.all([
    json('/v1/teams'),
    json('/v1/jobs?state=running&limit=1000'),
    json('/v1/usage?by=team'),
  ]);
  const used = new Map();
  for (const j of active.value) used.set(j.team, (used.get(j.team) || 0) + j.request.gpus);
  const hours = new Map(usage.value.map((u) => [u.team, u.gpu_hours]));
  return { teams: teams.value, used, hours };
}

export function render({ teams, used, hours }) {
  const rows = teams.map((t) => {
    const u = used.get(t.name) || 0;
    const max = Math.max(t.gpu_quota || 0, u, 1);
    return html`<tr><td><a href="#/jobs?team=${encodeURIComponent(t.name)}">${t.name}</a></td>
      <td class="num">${t.gpu_quota ?? '–'}</td><td class="num">${u}</td>
      <td><meter min="0" max="${max}" value="${u}" ${t.gpu_quota ? html`high="${t.gpu_quota}"` : ''}></meter></td>
      <td class="num"><a href="#/jobs?team=${encodeURIComponent(t.name)}&state=running">${t.active}</a></td>
      <td class="num"><a href="#/jobs?team=${encodeURIComponent(t.name)}&state=pending">${t.pending}</a></td>
      <td class="num">${(hours.get(t.name) || 0).toFixed(2)}</td></tr>`;
  });
  put(document.getElementById('teams-body'), teams.length
    ? html`<table class="grid"><thead><tr><th>Team</th><th>Quota (GPUs)</th><th>GPUs in use</th><th>Use vs quota</th>
      <th>Active jobs</th><th>Pending jobs</th><th>GPU-hours, 7 days</th></tr></thead><tbody>${rows}</tbody></table>`
    : html`<p class="empty">No teams yet.</p>`);
}
