// The shell: sign-in, hash routes, live updates and the polling fallback. Each page module
// exports `mount(main, ctx, refresh)` (builds what stays, such as filters), `load(ctx)`
// (fetches, or reads the live copy) and `render(data, ctx)` (rebuilds the changing part in one
// innerHTML assignment); optionally `live(ctx, name, data)`, which applies one pushed event to
// `ctx.data` and answers 'render' (draw it again), 'reload' (load again) or nothing, and
// `poll(ctx)`, true while the page needs polling even with the stream up (a followed log).
// While the stream (`live.js`) is up, pages change only when the server pushes a change; while
// it is down, every page is polled every 2 s.
// Every update is timed: JSON parsing plus render plus the layout it forces is recorded as a
// `gantry:update` performance measure, and the first as the `gantry:first-render` mark.

import { token, json, cost, ApiError } from './api.js';
import { Live } from './live.js';
import { html, put } from './view.js';
import * as fleet from './fleet.js';
import * as jobs from './jobs.js';
import * as job from './job.js';
import * as nodes from './nodes.js';
import * as teams from './teams.js';
import * as findings from './findings.js';
import * as services from './services.js';

const PAGES = { fleet, jobs, job, nodes, node: nodes, teams, findings, services };
const EVERY_MS = 2000;
/// Least time between two reloads a pushed change asks for.
const RELOAD_GAP_MS = 2000;

const $ = (id) => document.getElementById(id);
let current = null;
let firstRender = true;
let live = null;

function parseHash() {
  const [path, query] = location.hash.replace(/^#\/?/, '').split('?');
  const [name, arg] = path.split('/');
  return { name: PAGES[name] ? name : 'fleet', arg: arg ? decodeURIComponent(arg) : null, query: new URLSearchParams(query || '') };
}

function showLogin(message) {
  token.clear();
  stop();
  if (live) live.close();
  live = null;
  $('login').hidden = false;
  $('nav').hidden = true;
  $('logout').hidden = true;
  $('who').textContent = '';
  put($('main'), '');
  $('login-error').textContent = message || '';
  $('token').focus();
}

async function signIn(secret) {
  const { value: me } = await json('/v1/whoami', secret);
  token.set(secret);
  $('who').textContent = [me.user || `token ${me.token_id}`, me.role, (me.teams || []).join(', ')].filter(Boolean).join(' · ');
  $('login').hidden = true;
  $('nav').hidden = false;
  $('logout').hidden = false;
  if (live) live.close();
  live = new Live(onBatch, onLiveState);
  open();
}

function onLiveState(state) {
  if (state === 'refused') return showLogin('Your token was refused; sign in again.');
  // Up: load the page from the live copy and stop polling; down: poll from now on.
  if (current) refresh(current, PAGES[current.page]);
}

function onBatch(batch, parse) {
  const ctx = current;
  const page = ctx && PAGES[ctx.page];
  if (!page || !page.live) return;
  if (ctx.busy || !ctx.data) {
    // A load is running: apply these once it is done (applying twice changes nothing).
    ctx.queued = (ctx.queued || []).concat(batch);
    return;
  }
  try {
    apply(ctx, page, batch, parse);
  } catch (e) {
    status(`Update failed: ${e.message}`, true);
  }
}

function apply(ctx, page, batch, parse) {
  const start = performance.now();
  let action = null;
  for (const { name, data } of batch) {
    const a = page.live(ctx, name, data);
    if (a === 'reload' || (a === 'render' && action !== 'reload')) action = a;
  }
  if (action === 'render') {
    page.render(ctx.data, ctx);
    void document.body.offsetHeight;
    const end = performance.now();
    performance.measure('gantry:update', { start: start - parse, end, detail: { page: ctx.page, parse, via: 'stream' } });
    status(`Live · updated ${new Date().toLocaleTimeString()} · ${(end - start + parse).toFixed(0)} ms`);
  } else if (action === 'reload' && !ctx.reloadTimer) {
    const wait = Math.max(0, (ctx.loadedAt || 0) + RELOAD_GAP_MS - Date.now());
    ctx.reloadTimer = setTimeout(() => {
      ctx.reloadTimer = null;
      refresh(ctx, page);
    }, wait);
  }
}

function status(text, error = false) {
  $('status').textContent = text;
  $('status').classList.toggle('error', error);
}

function stop() {
  if (current) {
    clearTimeout(current.timer);
    clearTimeout(current.reloadTimer);
  }
  current = null;
}

function open() {
  stop();
  const route = parseHash();
  const page = PAGES[route.name];
  const ctx = { ...route, page: route.name, alive: true, timer: null, live };
  current = ctx;
  const tab = { job: 'jobs', node: 'nodes' }[route.name] || route.name;
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('here', a.dataset.page === tab);
  const main = $('main');
  put(main, html`<p class="loading">Loading…</p>`);
  page.mount(main, ctx, () => refresh(ctx, page));
  refresh(ctx, page);
}

async function refresh(ctx, page) {
  clearTimeout(ctx.timer);
  if (ctx !== current || ctx.busy) return;
  if (document.hidden) {
    ctx.timer = setTimeout(() => refresh(ctx, page), EVERY_MS);
    return;
  }
  ctx.busy = true;
  try {
    cost.parse = 0;
    ctx.live = live;
    const data = await page.load(ctx);
    if (ctx !== current) return;
    ctx.data = data;
    ctx.loadedAt = Date.now();
    const start = performance.now();
    page.render(data, ctx);
    void document.body.offsetHeight; // the layout this update causes, inside the measure
    const end = performance.now();
    performance.measure('gantry:update', { start: start - cost.parse, end, detail: { page: ctx.page, parse: cost.parse, via: 'load' } });
    if (firstRender) {
      firstRender = false;
      performance.mark('gantry:first-render', { detail: { page: ctx.page } });
    }
    const how = live && live.synced ? 'Live' : 'Polling every 2 s';
    status(`${how} · updated ${new Date().toLocaleTimeString()} · ${(end - start + cost.parse).toFixed(0)} ms`);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return showLogin('Your token was refused; sign in again.');
    status(`Update failed: ${e.message}`, true);
  } finally {
    ctx.busy = false;
  }
  if (ctx.queued && ctx === current) {
    const queued = ctx.queued;
    ctx.queued = null;
    onBatch(queued, 0);
  }
  const polling = !(live && live.synced) || (page.poll && page.poll(ctx));
  if (ctx === current && !ctx.done && polling) ctx.timer = setTimeout(() => refresh(ctx, page), EVERY_MS);
}

document.addEventListener('visibilitychange', () => {
  if (!document.hidden && current) refresh(current, PAGES[current.page]);
});

window.addEventListener('hashchange', () => {
  const code = location.hash.match(/^#signin=([A-Za-z0-9_-]{16,128})$/);
  if (code) signInWithCode(code[1]).catch((e) => showLogin(e.message));
  else if (token.get()) open();
});

$('login-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const secret = $('token').value.trim();
  $('token').value = '';
  try {
    await signInRetrying(secret, 2);
  } catch (e) {
    showLogin(e instanceof ApiError && e.status === 401 ? 'That token was refused.' : e.message);
  }
});

// A sign-in the network cut off (not one the server refused) is tried again, up to `retries`
// times a second apart: a request aborted by a network change says nothing about the token.
async function signInRetrying(secret, retries) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await signIn(secret);
    } catch (e) {
      if (e instanceof ApiError || attempt >= retries) throw e;
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
}

$('logout').addEventListener('click', () => showLogin(''));

// A link from `gantry dashboard` carries a one-time code in its fragment (never sent to a
// server): drop it from the address bar and history at once, then trade it for a session.
async function signInWithCode(code) {
  history.replaceState(null, '', location.pathname + location.search);
  const res = await fetch('/v1/signin', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ code }),
    cache: 'no-store',
  });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || `sign-in failed (${res.status})`);
  await signIn(body.token);
}

// A saved token is tried again for a minute while the network fails (a laptop waking, a network
// change): only the server refusing it signs the tab out.
const link = location.hash.match(/^#signin=([A-Za-z0-9_-]{16,128})$/);
const saved = token.get();
if (link) signInWithCode(link[1]).catch((e) => showLogin(e.message));
else if (saved) signInRetrying(saved, 60).catch((e) => showLogin(e.message));
else showLogin('');
