// Nodes: a table of all nodes, or (`#/node/{id}`) one node's GPUs with their readings, a
// sparkline of their utilisation since the page opened (from the live stream), holders and
// findings.

import { json } from './api.js';
import { gpusOf } from './fleet.js';
import { html, put, ago, pct, mib, reading, findings } from './view.js';

export function mount(main, ctx) {
  put(main, html`<div class="bar"><h1>${ctx.arg ? html`Node <span class="name">${ctx.arg}</span>` : 'Nodes'}</h1>
    ${ctx.arg ? html`<a href="#/nodes">all nodes</a>` : ''}</div><div id="nodes-body"></div>`);
}

export async function load(ctx) {
  const gpus = await gpusOf(ctx);
  const nodes = ctx.live && ctx.live.synced ? ctx.live.nodeList() : (await json('/v1/nodes')).value;
  return { nodes, gpus };
}

export function live(ctx, name) {
  if (name !== 'gpus' && name !== 'nodes') return null;
  ctx.data = { nodes: ctx.live.nodeList(), gpus: ctx.live.gpuList() };
  return 'render';
}

/// A GPU's utilisation over the last pushes as an SVG polyline (attributes only: the page's
/// policy allows no inline style).
function spark(points) {
  if (!points || points.length < 2) return html`<span class="muted">–</span>`;
  const step = 60 / (points.length - 1);
  const xy = points.map((p, i) => `${(i * step).toFixed(1)},${(20 - (p / 100) * 19).toFixed(1)}`).join(' ');
  return html`<svg class="spark" viewBox="0 0 60 20" preserveAspectRatio="none" role="img" aria-label="utilisation history"><polyline points="${xy}"></polyline></svg>`;
}

function summary(nodes, gpus) {
  const per = new Map(nodes.map((n) => [n.id, { gpus: 0, held: 0, bad: 0, util: [] }]));
  for (const g of gpus) {
    const p = per.get(g.node_id);
    if (!p) continue;
    p.gpus += 1;
    if (g.holders.length) p.held += 1;
    if (g.health !== 'healthy') p.bad += 1;
    const r = reading(g);
    if (r && r.util !== null) p.util.push(r.util);
  }
  const rows = nodes.map((n) => {
    const p = per.get(n.id);
    const mean = p.util.length ? p.util.reduce((a, b) => a + b, 0) / p.util.length : null;
    return html`<tr><td><a href="#/node/${encodeURIComponent(n.id)}">${n.id}</a></td><td>${n.hostname}</td>
      <td><span class="state n-${n.state}">${n.state}</span></td><td class="num">${p.gpus}</td><td class="num">${p.held}</td>
      <td class="num">${p.bad || ''}</td><td class="num">${pct(mean)}</td><td class="num">${(n.cpu_milli / 1000).toFixed(0)}</td>
      <td class="num">${mib(n.memory_mib)}</td><td>${ago(n.last_heartbeat)}</td></tr>`;
  });
  return html`<table class="grid"><thead><tr><th>Node</th><th>Host</th><th>State</th><th>GPUs</th><th>Allocated</th>
    <th>Not healthy</th><th>Mean util.</th><th>CPUs</th><th>Memory</th><th>Heartbeat</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function one(node, gpus, history) {
  if (!node) return html`<p class="error">No such node.</p>`;
  const rows = gpus.sort((a, b) => a.index - b.index).map((g) => {
    const r = reading(g);
    return html`<tr><td class="num">${g.index}</td><td>${g.model}</td><td><span class="state g-${g.health}">${g.health}</span></td>
      <td><meter min="0" max="100" value="${r?.util ?? 0}"></meter> ${pct(r?.util)}</td>
      <td>${spark(history && history.get(g.uuid))}</td>
      <td><meter min="0" max="100" value="${r?.mem ?? 0}"></meter> ${r ? mib(r.usedMib) : '–'} of ${mib(g.memory_mib)}</td>
      <td class="num">${r?.temp != null ? `${Math.round(r.temp)} °C` : '–'}</td><td class="num">${r?.power != null ? `${Math.round(r.power)} W` : '–'}</td>
      <td>${g.holders.map((h) => html`<a href="#/job/${h.job_id}">#${h.job_id}</a> `)}</td>
      <td class="reason">${findings(g).map((f) => `${f.kind}: ${f.detail}`).join('; ')}</td></tr>`;
  });
  return html`<p>${node.hostname} · <span class="state n-${node.state}">${node.state}</span> · epoch ${node.epoch} · ${(node.cpu_milli / 1000).toFixed(0)} CPUs ·
    ${mib(node.memory_mib)} · heartbeat ${ago(node.last_heartbeat)}</p>
    <table class="grid"><thead><tr><th>GPU</th><th>Model</th><th>Health</th><th>Utilisation</th><th>History</th><th>Memory</th><th>Temp.</th>
    <th>Power</th><th>Jobs</th><th>Findings</th></tr></thead><tbody>${rows}</tbody></table>`;
}

export function render({ nodes, gpus }, ctx) {
  const body = document.getElementById('nodes-body');
  const history = ctx.live && ctx.live.history;
  if (ctx.arg) put(body, one(nodes.find((n) => n.id === ctx.arg), gpus.filter((g) => g.node_id === ctx.arg), history));
  else put(body, summary(nodes, gpus));
}
