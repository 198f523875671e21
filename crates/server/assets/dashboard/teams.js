// Teams: quota (the guarantee), GPUs in use by active jobs and the queue.

import { json } from './api.js';
import { html, put } from './view.js';

export function mount(main) {
  put(main, html`<div class="bar"><h1>Teams and queues</h1></div><div id="teams-body"></div>`);
}

export async function load() {
  const [teams, active] = await Promise.all([json('/v1/teams'), json('/v1/jobs?state=running&limit=1000')]);
  const used = new Map();
  for (const j of active.value) used.set(j.team, (used.get(j.team) || 0) + j.request.gpus);
  return { teams: teams.value, used };
}

export function render({ teams, used }) {
  const rows = teams.map((t) => {
    const u = used.get(t.name) || 0;
    const max = Math.max(t.gpu_quota || 0, u, 1);
    return html`<tr><td><a href="#/jobs?team=${encodeURIComponent(t.name)}">${t.name}</a></td>
      <td class="num">${t.gpu_quota ?? '–'}</td><td class="num">${u}</td>
      <td><meter min="0" max="${max}" value="${u}" ${t.gpu_quota ? html`high="${t.gpu_quota}"` : ''}></meter></td>
      <td class="num"><a href="#/jobs?team=${encodeURIComponent(t.name)}&state=running">${t.active}</a></td>
      <td class="num"><a href="#/jobs?team=${encodeURIComponent(t.name)}&state=pending">${t.pending}</a></td></tr>`;
  });
  put(document.getElementById('teams-body'), teams.length
    ? html`<table class="grid"><thead><tr><th>Team</th><th>Quota (GPUs)</th><th>GPUs in use</th><th>Use vs quota</th>
      <th>Active jobs</th><th>Pending jobs</th></tr></thead><tbody>${rows}</tbody></table>`
    : html`<p class="empty">No teams yet.</p>`);
}
