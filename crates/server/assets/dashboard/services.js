// Services: each service the caller sees (`/v1/services`, scoped to its teams as the API
// decides) with its replica counts, the gateway's figures (requests/s, in flight, queued,
// latency and time to first byte) and why it has fewer replicas than it wants; under each, its
// replicas (job, state, generation, node, readiness) and the autoscaler's last decisions with
// their reasons. Pushed job changes reload it; so does a timer, for the traffic figures.

import { json } from './api.js';
import { html, put } from './view.js';

export function mount(main) {
  put(main, html`<div class="bar"><h1>Services</h1>
    <span class="muted">replicas behind the gateway, autoscaled (gantry service apply -f svc.yaml)</span></div>
    <div id="services-body"></div>`);
}

export async function load() {
  return (await json('/v1/services')).value;
}

export function live(ctx, name) {
  return name === 'jobs' ? 'reload' : null;
}

const secs = (v) => (v ? `${(v * 1000).toFixed(0)} ms` : '–');

function replicas(s) {
  return s.replica_list.map((r) => html`<tr data-job="${r.job}"><td><a href="#/job/${r.job}">#${r.job}</a></td>
    <td>${r.state}</td><td class="num">${r.generation}</td><td>${r.ready ? 'ready' : 'not ready'}</td>
    <td>${r.node ? html`<a href="#/node/${encodeURIComponent(r.node)}">${r.node}</a>` : '–'}</td>
    <td>${r.address || '–'}</td><td class="reason">${r.reason || ''}</td></tr>`);
}

function decisions(s) {
  return s.decisions.slice(0, 5).map((d) => html`<li><span class="muted">${new Date(d.at).toLocaleTimeString()}</span> ${d.reason}</li>`);
}

export function render(services) {
  const blocks = services.map((s) => {
    const r = s.replicas;
    const t = s.traffic;
    return html`<section class="service" data-service="${`${s.team}/${s.name}`}">
      <h2>${s.team}/${s.name} <span class="muted">generation ${s.generation}${s.public ? ' · public' : ''}</span></h2>
      <p><code>${s.endpoint}</code></p>
      <div class="tiles">
        <div class="tile${r.ready < r.desired ? ' warn' : ''}"><b>${r.ready}/${r.desired}</b> ready (${r.min}..${r.max})</div>
        <div class="tile"><b>${t.rps.toFixed(1)}</b> requests/s</div>
        <div class="tile"><b>${t.in_flight}</b> in flight</div>
        <div class="tile${t.queue_length ? ' warn' : ''}"><b>${t.queue_length}</b> queued</div>
        <div class="tile"><b>${secs(t.latency_p95_s)}</b> p95 latency</div>
        <div class="tile"><b>${secs(t.ttfb_p95_s)}</b> p95 first byte</div>
      </div>
      ${s.reason ? html`<p class="reason">${s.reason}</p>` : ''}
      ${s.rollout ? html`<p class="reason rollout">${s.rollout}</p>` : ''}
      <table class="grid"><thead><tr><th>Job</th><th>State</th><th class="num">Gen</th><th>Ready</th><th>Node</th>
        <th>Address</th><th>Why</th></tr></thead><tbody>${replicas(s)}</tbody></table>
      <ul class="decisions">${decisions(s)}</ul></section>`;
  });
  put(document.getElementById('services-body'), services.length
    ? blocks
    : html`<p class="empty">No services yet: <code>gantry service apply -f svc.yaml</code>.</p>`);
}
