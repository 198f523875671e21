// The fleet: every GPU as a cell, grouped by node, coloured by utilisation or memory, outlined
// by health; hovering names the jobs holding it (from the running jobs the caller may see).
// With the stream up, GPUs come from its live copy and each push redraws the map.

import { gpus as allGpus, jobsUpTo } from './api.js';
import { html, put, reading, findings, pct, mib } from './view.js';

export function mount(main, ctx, refresh) {
  ctx.colour = ctx.query.get('by') === 'memory' ? 'memory' : 'util';
  put(main, html`
    <div class="bar">
      <h1>Fleet</h1>
      <label>Colour by <select id="colour">
        <option value="util">utilisation</option><option value="memory">memory used</option>
      </select></label>
      <span class="legend"><span class="cell u0"></span> 0% <span class="cell u5"></span> 50% <span class="cell u10"></span> 100%
        <span class="cell none"></span> no reading <span class="cell u3 h-unhealthy"></span> unhealthy</span>
    </div>
    <div id="tiles" class="tiles"></div>
    <div id="heatmap" class="heatmap"></div>`);
  const select = document.getElementById('colour');
  select.value = ctx.colour;
  select.addEventListener('change', () => {
    ctx.colour = select.value;
    refresh();
  });
}

/// GPUs from the live copy once the stream is synced (else `/v1/gpus`), running jobs by REST.
export async function gpusOf(ctx) {
  const synced = ctx.live ? await ctx.live.whenSynced(1500) : false;
  return synced ? ctx.live.gpuList() : allGpus();
}

export async function load(ctx) {
  const [gpus, running] = await Promise.all([gpusOf(ctx), jobsUpTo({ state: 'running' }, 2000)]);
  return { gpus, running };
}

/// Pushed changes: GPUs are redrawn from the live copy; a job that starts or ends joins or
/// leaves the running list (for the names on hover).
export function live(ctx, name, changed) {
  if (name === 'gpus') {
    ctx.data.gpus = ctx.live.gpuList();
    if (ctx.changed !== 'all') {
      ctx.changed = ctx.changed || new Set();
      for (const v of changed) ctx.changed.add(v.gpu.uuid);
    }
    return 'render';
  }
  if (name === 'jobs') {
    ctx.changed = 'all'; // names on hover
    const byId = new Map(ctx.data.running.map((j) => [j.id, j]));
    for (const j of changed) {
      if (j.state === 'running') byId.set(j.id, j);
      else byId.delete(j.id);
    }
    ctx.data.running = [...byId.values()];
    return 'render';
  }
  return null;
}

/// A cell's class, link and hover text.
function look(gpu, colour, names) {
  const r = reading(gpu);
  const v = r ? (colour === 'memory' ? r.mem : r.util) : null;
  const bucket = v === null ? 'none' : `u${Math.min(10, Math.max(0, Math.round(v / 10)))}`;
  const holders = gpu.holders.map((h) => `#${h.job_id} ${names.get(h.job_id) || ''}`.trim());
  const problems = findings(gpu).map((f) => `${f.kind}: ${f.detail}`);
  const title = [
    `${gpu.node_id} GPU ${gpu.index} · ${gpu.model}`,
    `health ${gpu.health}`,
    r ? `utilisation ${pct(r.util)} · memory ${mib(r.usedMib)} of ${mib(gpu.memory_mib)}` : 'no reading',
    ...(holders.length ? holders.map((h) => `job ${h}`) : ['idle']),
    ...problems,
  ].join('\n');
  const cls = `cell ${bucket} h-${gpu.health}${holders.length ? ' held' : ''}`;
  const href = gpu.holders.length ? `#/job/${gpu.holders[0].job_id}` : `#/node/${encodeURIComponent(gpu.node_id)}`;
  return { cls, href, title };
}

function cell(gpu, colour, names) {
  const { cls, href, title } = look(gpu, colour, names);
  return html`<a class="${cls}" href="${href}" title="${title}" data-uuid="${gpu.uuid}"></a>`;
}

/// Updates the cells of the GPUs a push changed in place (no markup parsed); false when the
/// map must be drawn anew (first draw, other nodes or GPUs, another colouring).
function patch(gpus, names, layout, ctx) {
  if (!ctx.cells || ctx.layout !== layout || !ctx.changed) return false;
  for (const g of gpus) {
    if (ctx.changed !== 'all' && !ctx.changed.has(g.uuid)) continue;
    const el = ctx.cells.get(g.uuid);
    if (!el) return false;
    const { cls, href, title } = look(g, ctx.colour, names);
    if (el.className !== cls) el.className = cls;
    if (el.title !== title) el.title = title;
    if (el.getAttribute('href') !== href) el.setAttribute('href', href);
  }
  return true;
}

export function render({ gpus, running }, ctx) {
  const names = new Map(running.map((j) => [j.id, `${j.name} (${j.team})`]));
  const byNode = new Map();
  for (const g of gpus) {
    if (!byNode.has(g.node_id)) byNode.set(g.node_id, []);
    byNode.get(g.node_id).push(g);
  }
  const nodes = [...byNode.keys()].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
  const held = gpus.filter((g) => g.holders.length).length;
  const bad = gpus.filter((g) => g.health !== 'healthy').length;
  const utils = gpus.map((g) => reading(g)).filter((r) => r && r.util !== null).map((r) => r.util);
  const mean = utils.length ? utils.reduce((a, b) => a + b, 0) / utils.length : null;
  const idleHeld = gpus.filter((g) => g.holders.length && (reading(g)?.util ?? 100) < 5).length;
  put(document.getElementById('tiles'), html`
    <div class="tile"><b>${gpus.length}</b> GPUs on ${nodes.length} nodes</div>
    <div class="tile"><b>${held}</b> allocated</div>
    <div class="tile"><b>${pct(mean)}</b> mean utilisation</div>
    <div class="tile${idleHeld ? ' warn' : ''}"><b>${idleHeld}</b> allocated but idle</div>
    <div class="tile${bad ? ' warn' : ''}"><b>${bad}</b> not healthy</div>
    <div class="tile"><b>${running.length}</b> running jobs</div>`);
  const layout = `${ctx.colour}|${gpus.length}|${nodes.join(',')}`;
  const patched = patch(gpus, names, layout, ctx);
  ctx.changed = null;
  if (patched) return;
  const map = document.getElementById('heatmap');
  put(map, nodes.map((n) => html`
    <div class="node"><a class="name" href="#/node/${encodeURIComponent(n)}">${n}</a><div class="cells">${byNode
      .get(n).sort((a, b) => a.index - b.index).map((g) => cell(g, ctx.colour, names))}</div></div>`));
  ctx.cells = new Map([...map.querySelectorAll('[data-uuid]')].map((el) => [el.dataset.uuid, el]));
  ctx.layout = layout;
}
