// Findings: GPUs worth a look — allocated but idle, memory near its limit, throttled, starved of
// input (the GPU layer's findings from each node's samples) and GPUs that are not healthy
// (`/v1/findings`, which leaves out GPUs another team holds and names only the caller's jobs).
// Pushed GPU changes reload it (at most every 2 s).

import { json } from './api.js';
import { html, put } from './view.js';

const LABEL = {
  idle_allocated: 'Allocated but idle',
  memory_near_limit: 'Memory near its limit',
  thermal_throttle: 'Thermal throttling',
  power_throttle: 'Power throttling',
  input_starved: 'Starved of input',
  gpu_health: 'GPU not healthy',
};

export function mount(main) {
  put(main, html`<div class="bar"><h1>Findings</h1><span class="muted">idle allocations, throttling, failing GPUs</span></div>
    <div id="finding-tiles" class="tiles"></div><div id="findings-body"></div>`);
}

export async function load() {
  return (await json('/v1/findings')).value;
}

export function live(ctx, name) {
  return name === 'gpus' || name === 'jobs' ? 'reload' : null;
}

export function render(findings) {
  const counts = new Map();
  for (const f of findings) counts.set(f.kind, (counts.get(f.kind) || 0) + 1);
  put(document.getElementById('finding-tiles'), Object.keys(LABEL).map((k) => html`
    <div class="tile${counts.get(k) ? ' warn' : ''}" data-kind="${k}"><b>${counts.get(k) || 0}</b> ${LABEL[k]}</div>`));
  const rows = findings.map((f) => html`<tr data-kind="${f.kind}">
    <td>${LABEL[f.kind] || f.kind} <span class="kind muted">${f.kind}</span></td>
    <td><a href="#/node/${encodeURIComponent(f.node_id)}">${f.node_id}</a></td><td class="num">${f.gpu_index}</td>
    <td class="reason">${f.detail}</td>
    <td>${f.jobs.map((j) => html`<a href="#/job/${j.id}">#${j.id}</a> <span class="name">${j.name}</span> (${j.team}) `)}</td></tr>`);
  put(document.getElementById('findings-body'), findings.length
    ? html`<table class="grid"><thead><tr><th>Finding</th><th>Node</th><th class="num">GPU</th><th>Detail</th><th>Jobs</th></tr></thead>
      <tbody>${rows}</tbody></table>`
    : html`<p class="empty">Nothing to report: no idle allocation, throttling or failing GPU in view.</p>`);
}
