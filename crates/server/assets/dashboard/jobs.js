// Jobs the caller may see, newest first, 500 a page, filtered by state and team on the server;
// "Older" follows `x-next-before`. With the stream up, pushed job changes update the rows.

import { json, jobsPage } from './api.js';
import { html, raw, put, state, ago, duration } from './view.js';

const STATES = ['pending', 'scheduled', 'running', 'succeeded', 'failed', 'cancelled'];

export function mount(main, ctx, refresh) {
  ctx.filter = { state: ctx.query.get('state') || '', team: ctx.query.get('team') || '' };
  ctx.pages = [null]; // `before` of each page visited; the last is shown
  put(main, html`
    <div class="bar">
      <h1>Jobs</h1>
      <label>State <select id="f-state"><option value="">any</option>${STATES.map((s) => html`<option>${s}</option>`)}</select></label>
      <label>Team <select id="f-team"><option value="">any</option></select></label>
      <span class="spacer"></span>
      <button id="newer" type="button">‹ Newer</button>
      <button id="older" type="button">Older ›</button>
    </div>
    <div id="jobs-table"></div>`);
  const st = document.getElementById('f-state');
  const tm = document.getElementById('f-team');
  st.value = ctx.filter.state;
  const change = () => {
    ctx.filter = { state: st.value, team: tm.value };
    ctx.pages = [null];
    history.replaceState(null, '', `#/jobs?${new URLSearchParams(Object.entries(ctx.filter).filter(([, v]) => v))}`);
    refresh();
  };
  st.addEventListener('change', change);
  tm.addEventListener('change', change);
  document.getElementById('older').addEventListener('click', () => {
    if (ctx.next) ctx.pages.push(ctx.next);
    refresh();
  });
  document.getElementById('newer').addEventListener('click', () => {
    if (ctx.pages.length > 1) ctx.pages.pop();
    refresh();
  });
  json('/v1/teams').then(({ value }) => {
    put(tm, html`<option value="">any</option>${value.map((t) => html`<option>${t.name}</option>`)}`);
    tm.value = ctx.filter.team;
  }).catch(() => {});
}

const PAGE = 500;

export async function load(ctx) {
  return jobsPage({ ...ctx.filter, before: ctx.pages[ctx.pages.length - 1], limit: PAGE });
}

const matches = (f, j) => (!f.state || j.state === f.state) && (!f.team || j.team === f.team);

/// Pushed job changes: rows on the page take the job's new state; on the first page, new jobs
/// that pass the filters are added on top (the page keeps its 500 newest).
export function live(ctx, name, changed) {
  if (name !== 'jobs') return null;
  const list = ctx.data.jobs;
  const at = new Map(list.map((j, i) => [j.id, i]));
  const top = list.length ? list[0].id : 0;
  const fresh = [];
  ctx.only = ctx.only || new Set();
  for (const j of changed) {
    ctx.only.add(j.id);
    if (at.has(j.id)) list[at.get(j.id)] = j;
    else if (ctx.pages.length === 1 && j.id > top && matches(ctx.filter, j)) fresh.push(j);
  }
  if (fresh.length) {
    fresh.sort((a, b) => b.id - a.id);
    const all = fresh.concat(list);
    ctx.data.jobs = all.slice(0, PAGE);
    if (all.length > PAGE) ctx.data.next = String(ctx.data.jobs[PAGE - 1].id);
  }
  return 'render';
}

// GPUs asked: a count, `slice`, or an elastic job's range (with its width while it holds GPUs).
const gpus = (j) => {
  const r = j.request;
  if (r.gpus_max) {
    const range = `${r.gpus}..${r.gpus_max}`;
    return j.gpu_uuids.length ? `${j.gpu_uuids.length} (${range})` : range;
  }
  return r.gpus || (r.gpu_memory_mib ? 'slice' : 0);
};

const row = (j) => html`<tr>
  <td><a href="#/job/${j.id}">${j.id}</a></td>
  <td class="name"><a href="#/job/${j.id}">${j.name}</a></td>
  <td>${j.team}</td>
  <td>${state(j.state)}</td>
  <td class="num">${gpus(j)}</td>
  <td>${j.node_id || ''}</td>
  <td class="num">${j.priority}</td>
  <td>${ago(j.submitted_at)}</td>
  <td>${duration(j.started_at, j.finished_at)}</td>
  <td class="reason">${j.reason || ''}</td>
</tr>`;

// Rows are keyed by job id: when the page holds the same jobs as before, only rows whose text
// changed are replaced, so a quiet update costs almost nothing at 500 rows.
export function render({ jobs, next }, ctx) {
  ctx.next = next;
  document.getElementById('older').disabled = !next;
  document.getElementById('newer').disabled = ctx.pages.length <= 1;
  // A push redraws the rows of the jobs it changed; the others keep their text (relative
  // times included) until the next full pass, at most every 10 s.
  const prev = ctx.rows;
  const full = !ctx.only || !prev || Date.now() - (ctx.fullAt || 0) > 10_000;
  const kept = full ? null : new Map(prev);
  const rows = jobs.map((j) => [j.id, (kept && !ctx.only.has(j.id) && kept.get(j.id)) || row(j).toString()]);
  if (full) ctx.fullAt = Date.now();
  ctx.only = null;
  const body = document.querySelector('#jobs-table tbody');
  ctx.rows = rows;
  // New jobs on top of the same page: insert their rows and drop those pushed off the bottom.
  const added = prev && prev.length ? rows.findIndex((r) => r[0] === prev[0][0]) : -1;
  const drop = added > 0 ? prev.length + added - rows.length : -1;
  if (body && drop >= 0 && drop <= prev.length) {
    body.insertAdjacentHTML('afterbegin', rows.slice(0, added).map((r) => r[1]).join(''));
    for (let i = 0; i < drop; i++) body.deleteRow(-1);
    prev.splice(prev.length - drop, drop);
    prev.unshift(...rows.slice(0, added));
  }
  if (body && prev && prev.length === rows.length && prev.every((r, i) => r[0] === rows[i][0])) {
    rows.forEach((r, i) => {
      if (r[1] !== prev[i][1]) body.rows[i].outerHTML = r[1];
    });
    return;
  }
  put(document.getElementById('jobs-table'), jobs.length
    ? html`<table class="grid jobs"><colgroup><col class="c-id"><col class="c-name"><col class="c-team"><col class="c-state"><col class="c-gpus">
      <col class="c-node"><col class="c-prio"><col class="c-when"><col class="c-ran"><col class="c-reason"></colgroup>
      <thead><tr><th>ID</th><th>Name</th><th>Team</th><th>State</th><th class="num">GPUs</th><th>Node</th>
      <th class="num">Priority</th><th>Submitted</th><th>Ran</th><th>Reason</th></tr></thead><tbody>${rows.map((r) => raw(r[1]))}</tbody></table>`
    : html`<p class="empty">No jobs.</p>`);
}
