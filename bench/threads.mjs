// What --threads buys: two cabinds side by side in one run, one with `--threads 1` and one with
// `--threads 2`, each with one session under the same load in alternating rounds. Four loads:
// CDP round trips on several connections at once and bytes echoed through preview WebSocket
// tunnels (both pumped by the pump threads), small preview requests on keep-alive connections
// (relayed on the control thread), and frame streams to several viewers (the control thread).
// Reported: the median of the rounds, the ratio of --threads 2 to --threads 1, and the CPU each
// cabind used.
import crypto from 'node:crypto';
import http from 'node:http';

import { Cdp, startCabind, waitFor, wsOpen } from '../tests/integration/helpers.mjs';
import { ANIMATION, setContent } from './computer.mjs';
import { pageTarget } from './host_chromium.mjs';
import { cpuMs, load, sandboxBackend } from './preview.mjs';
import { summary } from './stats.mjs';

const THREADS = [1, 2];

// `conns` CDP connections to one page, each sending Runtime.evaluate back to back for `ms`.
async function cdpLoad(wsUrl, conns, ms) {
  const clients = await Promise.all(Array.from({ length: conns }, () => Cdp.connect(wsUrl)));
  const lat = [];
  const params = { expression: '1+1', returnByValue: true };
  const deadline = Date.now() + ms;
  const t0 = Date.now();
  await Promise.all(clients.map(async (c) => {
    while (Date.now() < deadline) {
      const s = process.hrtime.bigint();
      await c.send('Runtime.evaluate', params);
      lat.push(Number(process.hrtime.bigint() - s) / 1000);
    }
  }));
  const secs = (Date.now() - t0) / 1000;
  await Promise.all(clients.map((c) => c.close()));
  return { per_s: lat.length / secs, latency_us: summary(lat) };
}

// `conns` preview WebSocket tunnels to the backend's echo, each keeping `window` bytes in flight
// for `ms`: MiB/s echoed back, all tunnels together. Nothing but cabind's pumps (and the echo)
// touches these bytes.
async function tunnelLoad(url, headers, conns, ms) {
  const CHUNK = Buffer.alloc(64 << 10, 97);
  const window = 8;  // chunks in flight per tunnel
  const open = () => new Promise((resolve, reject) => {
    const req = http.request(url, {
      headers: {
        ...headers, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13',
        'sec-websocket-key': crypto.randomBytes(16).toString('base64'),
      },
    });
    req.on('upgrade', (res, socket) => resolve(socket));
    req.on('response', (res) => reject(new Error(`tunnel: ${res.statusCode}`)));
    req.on('error', reject);
    req.end();
  });
  const sockets = await Promise.all(Array.from({ length: conns }, open));
  let echoed = 0;
  let stop = false;
  const t0 = Date.now();
  await Promise.all(sockets.map((sock) => new Promise((resolve) => {
    let inFlight = 0;
    const fill = () => {
      while (!stop && inFlight < window * CHUNK.length) {
        sock.write(CHUNK);
        inFlight += CHUNK.length;
      }
    };
    sock.on('data', (d) => {
      echoed += d.length;
      inFlight -= d.length;
      if (stop && inFlight <= 0) resolve(); else fill();
    });
    sock.on('close', resolve);
    fill();
    setTimeout(() => { stop = true; if (inFlight <= 0) resolve(); }, ms);
  })));
  const secs = (Date.now() - t0) / 1000;
  for (const sock of sockets) sock.destroy();
  return { per_s: echoed / 2 ** 20 / secs };
}

// `viewers` frame WebSockets for `ms`: frames each received per second.
async function frameLoad(url, headers, viewers, ms) {
  const counts = new Array(viewers).fill(0);
  const sockets = await Promise.all(counts.map((_, i) => wsOpen(url, {
    headers, onMessage: (d, binary) => { if (binary) counts[i]++; },
  })));
  await new Promise((res) => setTimeout(res, ms));
  for (const ws of sockets) ws.close();
  return { per_s: summary(counts.map((c) => c / (ms / 1000))).p50 };
}

async function prepare(threads) {
  const cabin = await startCabind({ args: ['--log-level', 'warn', '--threads', String(threads)] });
  const auth = { authorization: `Bearer ${cabin.key}` };
  const created = await cabin.api('POST', '/v1/sessions', { resolution: { width: 1280, height: 800 } });
  if (created.status !== 201) throw new Error(`POST /v1/sessions -> ${created.status} ${created.text}`);
  const s = created.json;
  const page = await pageTarget(`${cabin.base}/v1/sessions/${s.id}/json/list`, { headers: auth });
  await setContent(page, ANIMATION);
  const list = await (await fetch(`${cabin.base}/v1/sessions/${s.id}/json/list`, { headers: auth })).json();
  const pageUrl = list.find((t) => t.type === 'page').webSocketDebuggerUrl;

  const { base: previewBase, cookie } = await sandboxBackend(cabin, s.id);
  await waitFor(async () => (await fetch(`${previewBase}/small`, { headers: { cookie } })).status === 200,
                { timeoutMs: 20000, intervalMs: 100, what: 'the preview backend' });
  return {
    threads,
    cabin,
    page,
    pageUrl,
    preview: { url: `${previewBase}/small`, headers: { cookie } },
    tunnel: { url: `${previewBase}/echo`, headers: { cookie } },
    frames: { url: `${cabin.base.replace('http', 'ws')}/v1/sessions/${s.id}/frames?format=jpeg&quality=80&fps=30`, headers: auth },
    close: async () => {
      await page.close();
      await cabin.api('DELETE', `/v1/sessions/${s.id}`);
      await cabin.stop();
    },
  };
}

// One load on one server, with the CPU cabind used meanwhile (in % of one core).
async function measured(side, fn) {
  const c0 = cpuMs(side.cabin.pid);
  const t0 = performance.now();
  const out = await fn();
  out.cpu_pct = ((cpuMs(side.cabin.pid) - c0) / (performance.now() - t0)) * 100;
  return out;
}

export async function benchThreads({ cdpConns, previewConns, tunnels, viewers, ms, rounds, log }) {
  const sides = [];
  try {
    for (const t of THREADS) sides.push(await prepare(t));
    log(`--threads 1 vs 2: ${rounds} alternating rounds of ${ms} ms; ${cdpConns} CDP connections, ` +
        `${previewConns} preview connections, ${tunnels} preview tunnels, ${viewers} frame viewers`);
    const loads = {
      cdp: (s) => cdpLoad(s.pageUrl, cdpConns, ms),
      preview: (s) => load(s.preview.url, s.preview.headers, { conns: previewConns, ms })
        .then((r) => ({ per_s: r.rps, latency_us: r.latency_us, errors: r.errors })),
      tunnel: (s) => tunnelLoad(s.tunnel.url, s.tunnel.headers, tunnels, ms),
      frames: (s) => frameLoad(s.frames.url, s.frames.headers, viewers, ms),
    };
    const runs = {};
    for (const name of Object.keys(loads)) {
      runs[name] = Object.fromEntries(THREADS.map((t) => [t, []]));
      for (const s of sides) await loads[name](s);  // warm-up
      for (let r = 0; r < rounds; r++) {
        // Every round in the other order, so that neither side always follows the other.
        for (const s of r % 2 ? [...sides].reverse() : sides) {
          runs[name][s.threads].push(await measured(s, () => loads[name](s)));
        }
      }
    }
    const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
    const res = { rounds, ms, cdp_conns: cdpConns, preview_conns: previewConns, tunnels, viewers };
    for (const [name, byThreads] of Object.entries(runs)) {
      const row = {};
      for (const t of THREADS) {
        const rs = byThreads[t];
        row[t] = {
          per_s: median(rs.map((x) => x.per_s)),
          p50_us: rs[0].latency_us ? median(rs.map((x) => x.latency_us.p50)) : undefined,
          p99_us: rs[0].latency_us ? median(rs.map((x) => x.latency_us.p99)) : undefined,
          cpu_pct: median(rs.map((x) => x.cpu_pct)),
        };
      }
      // Each round runs both sides back to back: the median of the rounds' ratios.
      row.ratio = median(byThreads[2].map((x, i) => x.per_s / byThreads[1][i].per_s));
      res[name] = row;
    }
    return res;
  } finally {
    for (const s of sides) await s.close().catch(() => {});
  }
}

export function threadsRows(r, fmt) {
  const row = (label, x, digits) => [label, fmt(x[2].per_s, digits), fmt(x[1].per_s, digits),
                                     `${fmt(x.ratio, 2)}x`, '', `cpu ${fmt(x[2].cpu_pct, 0)}% | ${fmt(x[1].cpu_pct, 0)}%`];
  return [
    ['--threads 2 | --threads 1', '2', '1', '2 / 1', '', 'cabind CPU 2 | 1'],
    row(`CDP round trips/s, ${r.cdp_conns} conns`, r.cdp, 0),
    ['  CDP round trip p99 (µs)', fmt(r.cdp[2].p99_us, 0), fmt(r.cdp[1].p99_us, 0),
     `${fmt(r.cdp[2].p99_us / r.cdp[1].p99_us, 2)}x`, '', ''],
    row(`preview small GET/s, ${r.preview_conns} conns`, r.preview, 0),
    row(`preview tunnel echo MiB/s, ${r.tunnels} tunnels`, r.tunnel, 0),
    row(`frames/s per viewer, ${r.viewers} viewers`, r.frames, 1),
  ];
}
