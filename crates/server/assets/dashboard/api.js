// The API as the page uses it: the token from sessionStorage in an Authorization header (never
// in a URL), JSON parsing timed so that an update's main-thread cost can be reported.

const KEY = 'gantry.token';

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (t) => sessionStorage.setItem(KEY, t),
  clear: () => sessionStorage.removeItem(KEY),
};

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/// Milliseconds spent in JSON.parse since the last reset (main-thread work of an update).
export const cost = { parse: 0 };

// A request that has not finished in this long is abandoned (its callers then retry, as after
// any network failure): a connection a network change left hanging would otherwise hold the
// page at its header for good.
const REQUEST_TIMEOUT_MS = 20000;

export async function request(path, secret = token.get(), method = 'GET') {
  const res = await fetch(path, {
    method,
    headers: { Authorization: `Bearer ${secret}` },
    cache: 'no-store',
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  if (!res.ok) {
    let message = `${res.status} ${res.statusText}`;
    try {
      message = (await res.json()).error || message;
    } catch { /* not JSON */ }
    throw new ApiError(res.status, message);
  }
  return res;
}

export async function json(path, secret) {
  const res = await request(path, secret);
  const text = await res.text();
  const t0 = performance.now();
  const value = JSON.parse(text);
  cost.parse += performance.now() - t0;
  return { value, headers: res.headers };
}

/// One page of jobs, newest first; `next` is the `before` of the following page (or null).
export async function jobsPage({ state, team, before, limit = 500 }) {
  const q = new URLSearchParams({ limit: String(limit) });
  if (state) q.set('state', state);
  if (team) q.set('team', team);
  if (before) q.set('before', before);
  const { value, headers } = await json(`/v1/jobs?${q}`);
  return { jobs: value, next: headers.get('x-next-before') };
}

/// Jobs up to `max`, following `x-next-before` across pages.
export async function jobsUpTo(filter, max) {
  let out = [];
  let before = null;
  do {
    const page = await jobsPage({ ...filter, before, limit: Math.min(1000, max - out.length) });
    out = out.concat(page.jobs);
    before = page.next;
  } while (before && out.length < max);
  return out;
}

/// GPUs as flat objects (the GPU's fields plus `holders`).
export async function gpus() {
  const { value } = await json('/v1/gpus');
  return value.map((v) => ({ ...v.gpu, holders: v.holders }));
}

/// POST without a body (cancel). The token is sent in a header, never a cookie, so another site
/// cannot make the browser send this request as the user: no CSRF token is needed.
export async function post(path) {
  return request(path, token.get(), 'POST');
}
