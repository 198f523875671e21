// Live updates pushed by the server: `GET /v1/watch`, Server-Sent Events read with fetch() so
// that the token travels in the Authorization header like every other call (EventSource cannot
// set headers, and a token in a URL ends up in logs and history). The stream sends every GPU
// and node once (`synced` marks the end of that), then only what changed, and each job whose
// state changed. This keeps a copy of GPUs and nodes; pages read it instead of re-reading
// `/v1/gpus`. When the stream drops, the shell polls until it is back (retried every 3 s).

import { token } from './api.js';

const RETRY_MS = 3000;
const HISTORY = 60;

export class Live {
  /// `onBatch(events, parseMs)`: the events of one chunk, once synced; `onState(state)`:
  /// 'live' (synced), 'down' (polling) or 'refused' (the token was refused).
  constructor(onBatch, onState) {
    this.onBatch = onBatch;
    this.onState = onState;
    this.gpus = new Map();
    this.nodes = new Map();
    /// Utilisation of each GPU over the last pushes (percent, oldest first), for sparklines.
    this.history = new Map();
    this.synced = false;
    this.closed = false;
    this.waiters = [];
    this.abort = new AbortController();
    this.run();
  }

  close() {
    this.closed = true;
    this.abort.abort();
    this.settle(false);
  }

  /// GPUs as flat objects (the GPU's fields plus `holders`), like api.gpus().
  gpuList() {
    return [...this.gpus.values()];
  }

  /// One point per GPU for a push that changed GPUs (unchanged ones repeat their reading).
  remember() {
    for (const [uuid, g] of this.gpus) {
      const util = g.sample?.sample?.gpu_util_percent;
      if (util === undefined || util === null) continue;
      const h = this.history.get(uuid) || [];
      h.push(util);
      if (h.length > HISTORY) h.shift();
      this.history.set(uuid, h);
    }
  }

  nodeList() {
    return [...this.nodes.values()];
  }

  /// Resolves true once synced, false after `ms` or when the stream is down.
  whenSynced(ms) {
    if (this.synced) return Promise.resolve(true);
    if (this.closed) return Promise.resolve(false);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      this.waiters.push((ok) => {
        clearTimeout(timer);
        resolve(ok);
      });
    });
  }

  settle(ok) {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w(ok);
  }

  down() {
    this.synced = false;
    this.settle(false);
    if (!this.closed) this.onState('down');
  }

  async run() {
    while (!this.closed) {
      try {
        const res = await fetch('/v1/watch', {
          headers: { Authorization: `Bearer ${token.get()}`, Accept: 'text/event-stream' },
          cache: 'no-store',
          signal: this.abort.signal,
        });
        if (res.status === 401) {
          this.closed = true;
          this.settle(false);
          this.onState('refused');
          return;
        }
        if (!res.ok || !res.body) throw new Error(`${res.status}`);
        await this.read(res.body.getReader());
      } catch { /* dropped: poll, then retry */ }
      if (this.closed) return;
      this.down();
      await new Promise((r) => setTimeout(r, RETRY_MS));
    }
  }

  async read(reader) {
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      const end = buffer.lastIndexOf('\n\n');
      if (end < 0) continue;
      const frames = buffer.slice(0, end).split('\n\n');
      buffer = buffer.slice(end + 2);
      this.chunk(frames);
    }
  }

  chunk(frames) {
    const batch = [];
    let parse = 0;
    let justSynced = false;
    for (const frame of frames) {
      let name = 'message';
      let data = '';
      for (const line of frame.split('\n')) {
        if (line.startsWith('event: ')) name = line.slice(7);
        else if (line.startsWith('data: ')) data += line.slice(6);
      }
      if (!data) continue; // a comment (keep-alive)
      const t0 = performance.now();
      const value = JSON.parse(data);
      parse += performance.now() - t0;
      if (name === 'hello') {
        this.synced = false;
        this.gpus.clear();
        this.nodes.clear();
      } else if (name === 'synced') {
        this.synced = true;
        justSynced = true;
      } else {
        if (name === 'gpus') {
          for (const v of value) this.gpus.set(v.gpu.uuid, { ...v.gpu, holders: v.holders });
          this.remember();
        }
        if (name === 'nodes') for (const n of value) this.nodes.set(n.id, n);
        batch.push({ name, data: value });
      }
    }
    if (justSynced) {
      this.settle(true);
      this.onState('live');
    } else if (this.synced && batch.length) {
      this.onBatch(batch, parse);
    }
  }
}
