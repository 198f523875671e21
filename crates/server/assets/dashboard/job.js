// One job: its fields, state transitions (one per attempt's start and end) and its output,
// followed while it runs. Output is appended as text nodes, never parsed as markup. A job that
// has not ended has a Cancel button (two clicks: the second confirms); the server decides
// whether the caller may (a member of the job's team, or an admin), as for `gantry cancel`.

import { json, request, post, ApiError } from './api.js';
import { html, put, state, when, duration, mib } from './view.js';

const MAX_CHARS = 2_000_000;

export function mount(main, ctx, refresh) {
  ctx.id = Number(ctx.arg);
  ctx.refresh = refresh;
  ctx.stream = 'stdout';
  ctx.offset = 0;
  ctx.decoder = new TextDecoder();
  put(main, html`
    <div id="job-head"></div>
    <div class="columns"><section id="job-fields"></section><section id="job-history"></section></div>
    <section class="logs">
      <div class="bar"><h2>Output</h2>
        <label><input type="radio" name="stream" value="stdout" checked> stdout</label>
        <label><input type="radio" name="stream" value="stderr"> stderr</label>
        <label><input type="checkbox" id="follow" checked> follow</label>
        <span id="log-note" class="muted"></span></div>
      <pre id="log" tabindex="0"></pre>
    </section>`);
  for (const radio of document.querySelectorAll('input[name=stream]')) {
    radio.addEventListener('change', () => {
      ctx.stream = radio.value;
      ctx.offset = 0;
      ctx.decoder = new TextDecoder();
      document.getElementById('log').textContent = '';
      ctx.done = false;
      refresh();
    });
  }
}

async function logChunk(ctx) {
  const res = await request(`/v1/jobs/${ctx.id}/logs?stream=${ctx.stream}&offset=${ctx.offset}`);
  const start = Number(res.headers.get('x-gantry-log-offset') || ctx.offset);
  const bytes = new Uint8Array(await res.arrayBuffer());
  const skipped = start > ctx.offset ? start - ctx.offset : 0;
  ctx.offset = start + bytes.length;
  return { text: ctx.decoder.decode(bytes, { stream: true }), skipped, size: bytes.length };
}

export async function load(ctx) {
  let detail;
  try {
    detail = (await json(`/v1/jobs/${ctx.id}`)).value;
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return { missing: true };
    throw e;
  }
  const chunks = [];
  for (let i = 0; i < 8; i++) {
    const c = await logChunk(ctx);
    if (c.size === 0) break;
    chunks.push(c);
  }
  return { detail, chunks };
}

const FINAL = ['succeeded', 'failed', 'cancelled', 'timeout'];

/// Logs are polled while the job has not ended, even with the stream up.
export function poll(ctx) {
  return !ctx.final;
}

/// A pushed change of this job: read it again now.
export function live(ctx, name, changed) {
  return name === 'jobs' && changed.some((j) => j.id === ctx.id) ? 'reload' : null;
}

function cancelButton(ctx, j, refresh) {
  const button = document.getElementById('cancel');
  if (!button) return;
  button.hidden = FINAL.includes(j.state) || Boolean(j.stop);
  if (button.dataset.wired) return;
  button.dataset.wired = '1';
  button.addEventListener('click', async () => {
    if (button.dataset.armed !== '1') {
      button.dataset.armed = '1';
      button.textContent = 'Click again to cancel';
      setTimeout(() => {
        button.dataset.armed = '';
        button.textContent = 'Cancel job';
      }, 5000);
      return;
    }
    button.disabled = true;
    const note = document.getElementById('cancel-note');
    try {
      await post(`/v1/jobs/${ctx.id}/cancel`);
      note.textContent = 'Cancel requested.';
      note.classList.remove('error');
      refresh();
    } catch (e) {
      note.textContent = `Could not cancel: ${e.message}`;
      note.classList.add('error');
    } finally {
      button.disabled = false;
      button.dataset.armed = '';
      button.textContent = 'Cancel job';
    }
  });
}

export function render({ missing, detail, chunks }, ctx) {
  if (missing) {
    put(document.getElementById('job-head'), html`<h1>Job ${ctx.id}</h1><p class="error">No such job, or not one of your teams'.</p>`);
    ctx.done = true;
    return;
  }
  const j = detail.job;
  if (!document.getElementById('cancel')) {
    put(document.getElementById('job-head'), html`<div class="bar"><h1>Job ${j.id} · <span class="name" id="job-name"></span></h1>
      <span id="job-state"></span><span class="spacer"></span><span id="cancel-note" class="muted" role="status"></span>
      <button id="cancel" type="button" class="danger" hidden>Cancel job</button></div>`);
  }
  document.getElementById('job-name').textContent = j.name;
  put(document.getElementById('job-state'), state(j.state));
  cancelButton(ctx, j, ctx.refresh);
  put(document.getElementById('job-fields'), html`<h2>Details</h2><dl class="fields">
    <dt>Team</dt><dd>${j.team}</dd>
    <dt>Command</dt><dd><code>${j.command.join(' ')}</code></dd>
    <dt>Request</dt><dd>${j.request.gpus_max ? `${j.request.gpus}..${j.request.gpus_max} GPUs (elastic${j.gpu_uuids.length ? `, holds ${j.gpu_uuids.length}` : ''})` : `${j.request.gpus} GPU${j.request.gpus === 1 ? '' : 's'}`}${j.request.gpu_memory_mib ? `, ${mib(j.request.gpu_memory_mib)} slice` : ''}, priority ${j.priority}</dd>
    <dt>Attempt</dt><dd>${j.attempt} of ${j.max_retries + 1}</dd>
    <dt>Node</dt><dd>${j.node_id ? html`<a href="#/node/${encodeURIComponent(j.node_id)}">${j.node_id}</a>` : '–'}</dd>
    <dt>GPUs</dt><dd>${j.gpu_uuids.join(', ') || '–'}</dd>
    <dt>Submitted</dt><dd>${when(j.submitted_at)}</dd>
    <dt>Ran</dt><dd>${duration(j.started_at, j.finished_at) || '–'}</dd>
    <dt>Exit code</dt><dd>${j.exit_code ?? '–'}</dd>
    <dt>Reason</dt><dd>${j.reason || '–'}</dd>
    ${detail.stall ? html`<dt>Stalled</dt><dd id="job-stall">${Math.round(detail.stall.share * 100)} % of its GPU time waiting for input (${detail.stall.stalled_gpu_hours.toFixed(3)} of ${detail.stall.measured_gpu_hours.toFixed(3)} GPU-hours judged)</dd>` : ''}
    ${(detail.loans || []).map((l) => l.owner === j.id
      ? html`<dt>Lent</dt><dd>${l.gpu_uuid} (idle since ${when(l.lent_at)}): ${l.borrower ? `borrowed by job ${l.borrower}` : 'no job borrows it yet'}; its own again as soon as it computes</dd>`
      : html`<dt>Borrows</dt><dd>${l.gpu_uuid} from job ${l.owner}: preempted when job ${l.owner} computes again</dd>`)}
  </dl>`);
  put(document.getElementById('job-history'), html`<h2>Transitions</h2><table class="grid"><thead><tr><th>At</th><th>From</th><th>To</th><th>Reason</th></tr></thead>
    <tbody>${detail.transitions.map((t) => html`<tr><td>${when(t.at)}</td><td>${t.from ? state(t.from) : ''}</td><td>${state(t.to)}</td><td class="reason">${t.reason || ''}</td></tr>`)}</tbody></table>`);
  const log = document.getElementById('log');
  const skipped = chunks.reduce((n, c) => n + c.skipped, 0);
  if (skipped) log.append(document.createTextNode(`[… ${skipped} bytes rotated away …]\n`));
  const text = chunks.map((c) => c.text).join('');
  if (text) log.append(document.createTextNode(text));
  if (log.textContent.length > MAX_CHARS) log.textContent = log.textContent.slice(-MAX_CHARS / 2);
  if (text && document.getElementById('follow').checked) log.scrollTop = log.scrollHeight;
  const final = FINAL.includes(j.state);
  ctx.final = final;
  document.getElementById('log-note').textContent = `${ctx.offset} bytes${final ? ' · finished' : ' · following'}`;
  if (final && chunks.length === 0) ctx.done = true;
}
