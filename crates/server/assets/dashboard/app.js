// The shell: sign-in, hash routes, and the refresh loop. Each page module exports
// `mount(main, ctx)` (builds what stays, such as filters), `load(ctx)` (fetches) and
// `render(data, ctx)` (rebuilds the changing part in one innerHTML assignment).
// Every refresh is timed: JSON parsing plus render plus the layout it forces is recorded as a
// `gantry:update` performance measure, and the first as the `gantry:first-render` mark.

import { token, json, cost, ApiError } from './api.js';
import { html, put } from './view.js';
import * as fleet from './fleet.js';
import * as jobs from './jobs.js';
import * as job from './job.js';
import * as nodes from './nodes.js';
import * as teams from './teams.js';

const PAGES = { fleet, jobs, job, nodes, node: nodes, teams };
const EVERY_MS = 2000;

const $ = (id) => document.getElementById(id);
let current = null;
let firstRender = true;

function parseHash() {
  const [path, query] = location.hash.replace(/^#\/?/, '').split('?');
  const [name, arg] = path.split('/');
  return { name: PAGES[name] ? name : 'fleet', arg: arg ? decodeURIComponent(arg) : null, query: new URLSearchParams(query || '') };
}

function showLogin(message) {
  token.clear();
  stop();
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
  open();
}

function stop() {
  if (current) clearTimeout(current.timer);
  current = null;
}

function open() {
  stop();
  const route = parseHash();
  const page = PAGES[route.name];
  const ctx = { ...route, page: route.name, alive: true, timer: null };
  current = ctx;
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('here', a.dataset.page === (route.name === 'job' ? 'jobs' : route.name === 'node' ? 'nodes' : route.name));
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
    const data = await page.load(ctx);
    if (ctx !== current) return;
    const start = performance.now();
    page.render(data, ctx);
    void document.body.offsetHeight; // the layout this update causes, inside the measure
    const end = performance.now();
    performance.measure('gantry:update', { start: start - cost.parse, end, detail: { page: ctx.page, parse: cost.parse } });
    if (firstRender) {
      firstRender = false;
      performance.mark('gantry:first-render', { detail: { page: ctx.page } });
    }
    $('status').textContent = `Updated ${new Date().toLocaleTimeString()} · ${(end - start + cost.parse).toFixed(0)} ms`;
    $('status').classList.remove('error');
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return showLogin('Your token was refused; sign in again.');
    $('status').textContent = `Update failed: ${e.message}`;
    $('status').classList.add('error');
  } finally {
    ctx.busy = false;
  }
  if (ctx === current && !ctx.done) ctx.timer = setTimeout(() => refresh(ctx, page), EVERY_MS);
}

document.addEventListener('visibilitychange', () => {
  if (!document.hidden && current) refresh(current, PAGES[current.page]);
});

window.addEventListener('hashchange', () => {
  if (token.get()) open();
});

$('login-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const secret = $('token').value.trim();
  $('token').value = '';
  try {
    await signIn(secret);
  } catch (e) {
    showLogin(e instanceof ApiError && e.status === 401 ? 'That token was refused.' : e.message);
  }
});

$('logout').addEventListener('click', () => showLogin(''));

const saved = token.get();
if (saved) signIn(saved).catch((e) => showLogin(e.message));
else showLogin('');
