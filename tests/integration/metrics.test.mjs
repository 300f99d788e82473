// /metrics and /readyz against a real cabind: the text passes Debian's promtool, its counters
// move as sessions are made, used and ended, the bytes relayed on CDP, VNC, frame and preview
// connections are counted, --metrics-listen serves /metrics alone without the key, and a real
// Prometheus scrapes both addresses.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

import {
  Cdp, freePort, openDescriptors, removeTree, startCabind, useCabind, waitFor, wsOpen,
} from './helpers.mjs';
import { exec, openPreview } from './preview_helpers.mjs';
import { wsViewer } from './rfb_client.mjs';

const ctx = useCabind({ args: ['--metrics-listen', '127.0.0.1:0'] });

// The --metrics-listen address, as cabind logs it once bound.
let metricsBase;
async function metricsAddress() {
  metricsBase ??= await waitFor(() => {
    const m = /metrics: GET \/metrics without the API key on (http:\/\/127\.0\.0\.1:\d+)/
      .exec(ctx.server.logTail(400));
    return m?.[1];
  }, { what: 'the metrics listener in the log' });
  return metricsBase;
}

// TCP sockets `pid` listens on: its socket inodes that /proc/net/tcp{,6} show in state LISTEN.
function listeningSockets(pid) {
  const inodes = new Set();
  for (const target of openDescriptors(pid).values()) {
    const m = /^socket:\[(\d+)\]$/.exec(target);
    if (m) inodes.add(m[1]);
  }
  let n = 0;
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of fs.readFileSync(table, 'utf8').split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f[3] === '0A' && inodes.has(f[9])) n += 1;
    }
  }
  return n;
}

async function scrape() {
  const r = await ctx.server.api('GET', '/metrics');
  assert.equal(r.status, 200, r.text);
  return r.text;
}

// The value of one sample (`name{labels}`, labels as written), or 0 when it is not there.
function sample(text, series) {
  for (const line of text.split('\n')) {
    if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  }
  return 0;
}

test('/readyz is public and says whether creates are taken; /metrics needs the key', async () => {
  const ready = await fetch(`${ctx.server.base}/readyz`);
  assert.equal(ready.status, 200);
  assert.deepEqual(await ready.json(), { status: 'ready' });
  const anon = await ctx.server.api('GET', '/metrics', undefined, { key: null });
  assert.equal(anon.status, 401);
  const r = await fetch(`${ctx.server.base}/metrics`, { headers: { authorization: `Bearer ${ctx.server.key}` } });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
});

test('the counters move as sessions are made, used and ended, and promtool accepts the text', async () => {
  const before = await scrape();
  const s = await ctx.server.createSession({});
  const cdp = await Cdp.connect(s.cdp_url);
  await cdp.send('Browser.getVersion');
  const bad = await ctx.server.api('GET', `/v1/sessions/${s.id}/live/status?token=forged`, undefined,
                                   { key: null });
  assert.equal(bad.status, 401);
  let now = await scrape();
  const creates = 'cabin_session_creates_total{driver="namespace",outcome="ready"}';
  assert.equal(sample(now, creates), sample(before, creates) + 1);
  assert.equal(sample(now, 'cabin_sessions{state="running",driver="namespace"}'), 1);
  assert.equal(sample(now, 'cabin_connections{kind="cdp"}'), 1);
  assert.ok(sample(now, 'cabin_session_create_seconds_count{driver="namespace"}') >= 1);
  const refused = 'cabin_token_refusals_total{reason="invalid_token"}';
  assert.equal(sample(now, refused), sample(before, refused) + 1);
  assert.doesNotMatch(now, new RegExp(s.id), 'no session id in any label');

  cdp.ws.close();
  await cdp.closed;
  assert.equal((await ctx.server.api('DELETE', `/v1/sessions/${s.id}`)).status, 200);
  const ended = 'cabin_session_ends_total{reason="deleted"}';
  now = await waitFor(async () => {
    const t = await scrape();
    return sample(t, 'cabin_connections{kind="cdp"}') === 0 && t;
  }, { what: 'the CDP connection to be counted closed' });
  assert.equal(sample(now, ended), sample(before, ended) + 1);
  assert.equal(sample(now, 'cabin_sessions{state="running",driver="namespace"}'), 0);

  const check = spawnSync('promtool', ['check', 'metrics'], { input: now, encoding: 'utf8' });
  assert.equal(check.status, 0, `promtool: ${check.stdout}${check.stderr}`);
});

test('--metrics-listen serves GET /metrics without the key, and nothing else', async () => {
  const base = await metricsAddress();
  const r = await fetch(`${base}/metrics`);
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  const text = await r.text();
  assert.match(text, /^# TYPE cabin_session_creates_total counter$/m);
  assert.match(text, /^cabin_relayed_bytes_total\{kind="cdp",direction="up"\} \d+$/m);
  // A key, right or wrong, changes nothing there.
  const wrong = await fetch(`${base}/metrics`, { headers: { authorization: 'Bearer wrong' } });
  assert.equal(wrong.status, 200);
  await wrong.text();
  for (const [method, p] of [['GET', '/'], ['GET', '/healthz'], ['GET', '/readyz'],
    ['GET', '/v1/sessions'], ['GET', '/metrics/'], ['POST', '/metrics'], ['HEAD', '/metrics'],
    ['GET', '/console/']]) {
    const other = await fetch(base + p, {
      method, headers: { authorization: `Bearer ${ctx.server.key}` },
    });
    assert.equal(other.status, 404, `${method} ${p} -> ${other.status}`);
    if (method !== 'HEAD') assert.equal((await other.json()).error.code, 'not_found');
  }
  // On the API listener the key is still needed.
  const anon = await ctx.server.api('GET', '/metrics', undefined, { key: null });
  assert.equal(anon.status, 401);
  // This cabind listens twice; one without the flag, once.
  assert.equal(listeningSockets(ctx.server.pid), 2);
  const plain = await startCabind();
  try {
    assert.equal(listeningSockets(plain.pid), 1);
    assert.doesNotMatch(plain.logTail(400), /metrics: GET/);
  } finally {
    await plain.stop();
  }
});

test('bytes relayed on CDP, VNC, frame and preview connections are counted both ways',
  async () => {
    const s = await ctx.server.createSession({ resolution: { width: 1024, height: 768 } });
    const series = (kind, direction) =>
      `cabin_relayed_bytes_total{kind="${kind}",direction="${direction}"}`;
    // Scrapes and returns how far each series moved since `since` (a scrape's text).
    const moved = async (since, kind) => {
      const now = await scrape();
      return {
        up: sample(now, series(kind, 'up')) - sample(since, series(kind, 'up')),
        down: sample(now, series(kind, 'down')) - sample(since, series(kind, 'down')),
      };
    };
    // A relay counts what it has written once the write completes, which may be a moment after
    // the client has the bytes: the counts are waited for, then checked.
    const counted = (since, kind, enough) => waitFor(async () => {
      const m = await moved(since, kind);
      return enough(m) && m;
    }, { what: `the ${kind} bytes counted` }).catch(async () => moved(since, kind));

    // CDP: 100 kB of expression up, 200 kB of answer down, counted while the client stays.
    let before = await scrape();
    const cdp = await Cdp.connect(s.cdp_url);
    const { targetInfos } = await cdp.send('Target.getTargets');
    const page = targetInfos.find((t) => t.type === 'page');
    const { sessionId } = await cdp.send('Target.attachToTarget',
                                         { targetId: page.targetId, flatten: true });
    const r = await cdp.send('Runtime.evaluate', {
      expression: `'${'u'.repeat(100000)}'.length + 'd'.repeat(200000)`, returnByValue: true,
    }, sessionId);
    assert.equal(r.result.value.length, 6 + 200000);
    let d = await counted(before, 'cdp', (m) => m.up >= 100000 && m.down >= 200000);
    assert.ok(d.up >= 100000 && d.up < 200000, `cdp up ${d.up}`);
    assert.ok(d.down >= 200000 && d.down < 400000, `cdp down ${d.down}`);
    await cdp.close();

    // VNC: a whole 1024x768 screen in Raw, 4 bytes a pixel, down; the client's setup up.
    before = await scrape();
    const vnc = await wsViewer(s.vnc_url);
    await vnc.fullFrame();
    d = await counted(before, 'vnc', (m) => m.down >= 1024 * 768 * 4 && m.up >= 52);
    assert.ok(d.down >= 1024 * 768 * 4, `vnc down ${d.down}`);
    // ProtocolVersion 12, security 1, ClientInit 1, SetPixelFormat 20, SetEncodings 8, request 10
    assert.ok(d.up >= 52, `vnc up ${d.up}`);
    vnc.close();

    // Frames: the images sent to a viewer, down.
    before = await scrape();
    const frames = [];
    const fws = await wsOpen(`${ctx.server.base.replace('http', 'ws')}/v1/sessions/${s.id}/frames?format=png&fps=2`, {
      headers: { authorization: `Bearer ${ctx.server.key}` },
      onMessage: (data, binary) => { if (binary) frames.push(data); },
    });
    await waitFor(() => frames.length >= 1, { what: 'a frame' });
    d = await counted(before, 'frames', (m) => m.down >= frames[0].length);
    assert.ok(d.down >= frames[0].length, `frames down ${d.down}`);
    assert.equal(d.up, 0);
    fws.close();

    // Preview: a 300 kB file down through the proxy, the request up.
    await exec(ctx.server, s.id, ['sh', '-c', [
      'mkdir -p /tmp/site && head -c 300000 /dev/zero > /tmp/site/big',
      '(setsid python3 -m http.server 8001 --bind 127.0.0.1 --directory /tmp/site ' +
        '> /dev/null 2>&1 < /dev/null &)',
    ].join(' && ')]);
    await waitFor(async () => (await exec(ctx.server, s.id, [
      'python3', '-c', 'import socket; socket.create_connection(("127.0.0.1", 8001), 1)',
    ])).exit_code === 0, { timeoutMs: 20000, intervalMs: 200, what: 'the file server' });
    const pv = await openPreview(ctx.server, s.id, 8001, 'path');
    before = await scrape();
    const big = await fetch(`${pv.base}${pv.prefix}/big`, { headers: { cookie: pv.cookie } });
    assert.equal(big.status, 200);
    assert.equal((await big.arrayBuffer()).byteLength, 300000);
    d = await counted(before, 'preview', (m) => m.down >= 300000 && m.up > 0);
    assert.ok(d.down >= 300000 && d.down < 310000, `preview down ${d.down}`);
    assert.ok(d.up > 0 && d.up < 4096, `preview up ${d.up}`);

    assert.equal((await ctx.server.api('DELETE', `/v1/sessions/${s.id}`)).status, 200);
  });

test('a real Prometheus scrapes cabind with the API key, and --metrics-listen without', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-prom-'));
  const port = await freePort();
  const open = new URL(await metricsAddress()).host;
  fs.writeFileSync(path.join(dir, 'key'), ctx.server.key);
  fs.writeFileSync(path.join(dir, 'prometheus.yml'), [
    'global: {scrape_interval: 1s, scrape_timeout: 1s}',
    'scrape_configs:',
    '  - job_name: cabin',
    `    authorization: {type: Bearer, credentials_file: ${path.join(dir, 'key')}}`,
    `    static_configs: [{targets: ["127.0.0.1:${ctx.server.port}"]}]`,
    '  - job_name: cabin-open',
    `    static_configs: [{targets: ["${open}"]}]`,
  ].join('\n') + '\n');
  const prom = spawn('prometheus', [`--config.file=${path.join(dir, 'prometheus.yml')}`,
    `--storage.tsdb.path=${path.join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`],
  { stdio: ['ignore', 'ignore', 'pipe'] });
  const log = [];
  prom.stderr.on('data', (d) => log.push(d.toString()));
  try {
    const query = async (q) => {
      const r = await fetch(`http://127.0.0.1:${port}/api/v1/query?query=${encodeURIComponent(q)}`);
      return r.ok ? (await r.json()).data.result : [];
    };
    const up = await waitFor(async () => {
      const r = await query('up{job="cabin"}').catch(() => []);
      return r.length === 1 && r[0].value[1] === '1' && r;
    }, { timeoutMs: 30000, intervalMs: 250, what: `Prometheus to scrape cabind\n${log.join('')}` });
    assert.equal(up[0].metric.instance, `127.0.0.1:${ctx.server.port}`);
    const upOpen = await waitFor(async () => {
      const r = await query('up{job="cabin-open"}').catch(() => []);
      return r.length === 1 && r[0].value[1] === '1' && r;
    }, { timeoutMs: 30000, intervalMs: 250, what: `Prometheus to scrape ${open}\n${log.join('')}` });
    assert.equal(upOpen[0].metric.instance, open);
    const creates = await waitFor(async () => {
      const r = await query('cabin_session_creates_total');
      return r.length > 0 && r;
    }, { timeoutMs: 10000, what: 'the creates counter in Prometheus' });
    assert.ok(creates.some((c) => c.metric.outcome === 'ready' && Number(c.value[1]) >= 1));
  } finally {
    prom.kill('SIGTERM');
    await new Promise((r) => prom.once('exit', r));
    await removeTree(dir);
  }
});
