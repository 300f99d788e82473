// Cabin benchmarks, side by side with the floor (Xvfb + Chromium started directly on the host) in
// one run: create-to-CDP-ready, CDP round-trip latency through the bridge, and large-message
// throughput (screenshots); on request (--only microvm or --microvm) the microvm driver against
// the same guest booted by hand (microvm.mjs). Prints a table and writes bench/results/latest.json.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { BIN_DIR, Cdp, api, startCabind, waitFor } from '../tests/integration/helpers.mjs';
import { chromiumVersion, pageTarget, startHostBrowser } from './host_chromium.mjs';
import { benchComputer, computerRows } from './computer.mjs';
import { benchMicrovm, microvmRows } from './microvm.mjs';
import { benchVnc, vncRows } from './vnc.mjs';
import { benchEgress, egressRows } from './egress.mjs';
import { benchPreview, previewRows } from './preview.mjs';
import { benchFiles, filesRows } from './files.mjs';
import { benchPause, pauseRows } from './pause.mjs';
import { benchRecording, recordingRows } from './recording.mjs';
import { benchPool, poolRows } from './pool.mjs';
import { benchFork, forkRows } from './fork.mjs';
import { benchTemplate, templateRows } from './template.mjs';
import { benchHibernate, hibernateRows } from './hibernate.mjs';
import { benchRestart, restartRows } from './restart.mjs';
import { benchThreads, threadsRows } from './threads.mjs';
import { benchScaleOut, scaleRows } from './scale_out.mjs';
import { summary } from './stats.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const WIDTH = 1280;
const HEIGHT = 800;

const { values: opt } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    n: { type: 'string' },
    rtt: { type: 'string' },
    shots: { type: 'string' },
    url: { type: 'string', default: process.env.CABIN_URL || '' },
    out: { type: 'string', default: path.join(HERE, 'results', 'latest.json') },
    only: { type: 'string', default: 'create,latency,screenshot,computer,vnc,preview,threads,egress,pause,restart,pool,fork,files,recording' },
    'egress-rounds': { type: 'string' },
    'threads-rounds': { type: 'string' },
    'preview-conns': { type: 'string', default: '16' },
    'preview-ms': { type: 'string' },
    'preview-big': { type: 'string' },
    'preview-rounds': { type: 'string' },
    microvm: { type: 'boolean', default: false },
    'vm-n': { type: 'string', default: '5' },
    'vm-warmup': { type: 'string', default: '0' },
    'scale-sessions': { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (opt.help) {
  console.log(`usage: bench/run [--quick] [--n N] [--rtt N] [--shots N]
                 [--only create,latency,screenshot,computer,vnc,preview,threads,egress,pause,restart,pool,fork,files,recording,microvm,template,hibernate,scale] [--microvm] [--vm-n N] [--vm-warmup N]
                 [--scale-sessions N]
                 [--preview-conns N] [--preview-ms MS] [--preview-big MIB] [--preview-rounds N]
                 [--threads-rounds N] [--egress-rounds N]
                 [--url http://127.0.0.1:8080 (with CABIN_API_KEY)] [--out FILE]`);
  process.exit(0);
}
const N = Number(opt.n ?? (opt.quick ? 5 : 20));
const RTT = Number(opt.rtt ?? (opt.quick ? 1000 : 5000));
const RTT_WARMUP = opt.quick ? 100 : 200;
const SHOTS = Number(opt.shots ?? (opt.quick ? 10 : 50));
const only = new Set(opt.only.split(','));
// The microVM part takes minutes (TCG boots), so it runs only when asked for.
if (opt.microvm) only.add('microvm');
const VM_N = Number(opt['vm-n']);
const VM_WARMUP = Number(opt['vm-warmup']);
const PREVIEW = {
  conns: Number(opt['preview-conns']),
  ms: Number(opt['preview-ms'] ?? (opt.quick ? 1000 : 2000)),
  bigMiB: Number(opt['preview-big'] ?? (opt.quick ? 64 : 256)),
  rounds: Number(opt['preview-rounds'] ?? (opt.quick ? 2 : 8)),
};

const EGRESS = {
  ttfbN: opt.quick ? 50 : 200,
  bigMiB: opt.quick ? 64 : 256,
  rounds: Number(opt['egress-rounds'] ?? (opt.quick ? 2 : 5)),
  injectConns: 8,
  injectMs: opt.quick ? 1000 : 2000,
};

const THREADS = {
  cdpConns: 8,
  previewConns: Number(opt['preview-conns']),
  tunnels: 4,
  viewers: 10,
  ms: opt.quick ? 1000 : 2000,
  rounds: Number(opt['threads-rounds'] ?? (opt.quick ? 2 : 6)),
};

const log = (...a) => console.error('[bench]', ...a);

// ---------------------------------------------------------------------------------------------
// the cabind under test

async function getCabind() {
  if (opt.url) {
    const key = process.env.CABIN_API_KEY;
    if (!key) throw new Error('--url needs CABIN_API_KEY in the environment');
    const base = opt.url.replace(/\/$/, '');
    return {
      base,
      key,
      external: true,
      api: (m, p, b, o) => api(base, key, m, p, b, o),
      stop: async () => ({ code: 0 }),
    };
  }
  log(`starting ${path.join(BIN_DIR, 'cabind')}`);
  // The microvm part reads the guest console and the driver's markers from cabind's info log.
  // Its microVMs boot cold: the microvm part compares boots (templates: --only template).
  return startCabind({
    args: ['--log-level', only.has('microvm') ? 'info' : 'warn', '--microvm-templates', 'off'],
  });
}

async function createSession(cabin, spec) {
  const r = await cabin.api('POST', '/v1/sessions', spec);
  if (r.status !== 201) throw new Error(`POST /v1/sessions -> ${r.status} ${r.text}`);
  return r.json;
}

async function deleteSession(cabin, id) {
  const r = await cabin.api('DELETE', `/v1/sessions/${id}`);
  if (r.status !== 200) throw new Error(`DELETE ${id} -> ${r.status} ${r.text}`);
}

// ---------------------------------------------------------------------------------------------
// 1. create to CDP ready

async function cabinCreateToReady(cabin) {
  const t0 = process.hrtime.bigint();
  const s = await createSession(cabin, { resolution: { width: WIDTH, height: HEIGHT } });
  const tPost = process.hrtime.bigint();
  const cdp = await Cdp.connect(s.cdp_url);
  await cdp.send('Browser.getVersion');
  const t1 = process.hrtime.bigint();
  await cdp.close();
  await deleteSession(cabin, s.id);
  return { total: Number(t1 - t0) / 1e6, post: Number(tPost - t0) / 1e6 };
}

async function floorCreateToReady() {
  const t0 = process.hrtime.bigint();
  const hb = await startHostBrowser({ width: WIDTH, height: HEIGHT });
  const cdp = await Cdp.connect(hb.version.webSocketDebuggerUrl);
  await cdp.send('Browser.getVersion');
  const t1 = process.hrtime.bigint();
  await cdp.close();
  await hb.stop();
  return { total: Number(t1 - t0) / 1e6 };
}

async function benchCreate(cabin) {
  log(`create→CDP ready: ${N} sessions, and ${N} host browsers (1 warm-up each)`);
  await cabinCreateToReady(cabin);
  await floorCreateToReady();
  const cabinMs = [];
  const postMs = [];
  const floorMs = [];
  for (let i = 0; i < N; i++) {
    // Alternating keeps slow drifts of the machine out of the ratio.
    const c = await cabinCreateToReady(cabin);
    cabinMs.push(c.total);
    postMs.push(c.post);
    floorMs.push((await floorCreateToReady()).total);
  }
  const cabinS = summary(cabinMs);
  const floorS = summary(floorMs);
  return {
    unit: 'ms',
    cabin: cabinS,
    cabin_post_answered: summary(postMs),
    floor: floorS,
    ratio_p50: cabinS.p50 / floorS.p50,
    target: 'ratio_p50 <= 1.5',
    met: cabinS.p50 / floorS.p50 <= 1.5,
    samples: { cabin: cabinMs, floor: floorMs },
  };
}

// ---------------------------------------------------------------------------------------------
// shared: one cabind session and one host browser, each with a page target on raw CDP

async function openPair(cabin) {
  const s = await createSession(cabin, { resolution: { width: WIDTH, height: HEIGHT } });
  const hb = await startHostBrowser({ width: WIDTH, height: HEIGHT });
  const viaCabin = await pageTarget(`${cabin.base}/v1/sessions/${s.id}/json/list`, {
    headers: { authorization: `Bearer ${cabin.key}` },
  });
  const direct = await pageTarget(`http://127.0.0.1:${hb.port}/json/list`);
  return {
    sides: { cabin: viaCabin, direct },
    close: async () => {
      await viaCabin.close();
      await direct.close();
      await deleteSession(cabin, s.id);
      await hb.stop();
    },
  };
}

// ---------------------------------------------------------------------------------------------
// 2. bridge latency

async function rtts(cdp, count) {
  const out = new Array(count);
  const params = { expression: '1+1', returnByValue: true };
  for (let i = 0; i < count; i++) {
    const t0 = process.hrtime.bigint();
    await cdp.send('Runtime.evaluate', params);
    out[i] = Number(process.hrtime.bigint() - t0) / 1e3;
  }
  return out;
}

async function benchLatency(pair) {
  log(`Runtime.evaluate round trips: ${RTT} each after ${RTT_WARMUP} warm-up`);
  const { cabin, direct } = pair.sides;
  await rtts(cabin, RTT_WARMUP);
  await rtts(direct, RTT_WARMUP);
  const res = { cabin: [], direct: [] };
  const block = Math.min(500, RTT);
  while (res.cabin.length < RTT) {
    const k = Math.min(block, RTT - res.cabin.length);
    res.cabin.push(...(await rtts(cabin, k)));
    res.direct.push(...(await rtts(direct, k)));
  }
  const c = summary(res.cabin);
  const d = summary(res.direct);
  return {
    unit: 'µs',
    cabin: c,
    direct: d,
    added_p50: c.p50 - d.p50,
    added_p99: c.p99 - d.p99,
    target: 'added_p50 <= 50',
    met: c.p50 - d.p50 <= 50,
  };
}

// ---------------------------------------------------------------------------------------------
// 3. large messages

// A page that compresses badly: seeded noise under a gradient and text, drawn on a canvas.
const BUSY_PAGE = `<!doctype html><title>busy</title>
<style>html,body{margin:0;overflow:hidden}canvas{display:block}</style>
<canvas id=c width=${WIDTH} height=${HEIGHT}></canvas>
<script>
const c = document.getElementById('c'), g = c.getContext('2d');
const img = g.createImageData(${WIDTH}, ${HEIGHT});
let s = 12345;
for (let i = 0; i < img.data.length; i += 4) {
  s = (s * 1103515245 + 12345) >>> 0; img.data[i] = s >>> 24;
  s = (s * 1103515245 + 12345) >>> 0; img.data[i + 1] = s >>> 24;
  s = (s * 1103515245 + 12345) >>> 0; img.data[i + 2] = s >>> 24;
  img.data[i + 3] = 255;
}
g.putImageData(img, 0, 0);
const grad = g.createLinearGradient(0, 0, ${WIDTH}, ${HEIGHT});
grad.addColorStop(0, 'rgba(255,0,0,0.4)'); grad.addColorStop(1, 'rgba(0,0,255,0.4)');
g.fillStyle = grad; g.fillRect(0, 0, ${WIDTH}, ${HEIGHT});
g.fillStyle = '#fff'; g.font = '24px sans-serif';
for (let y = 30; y < ${HEIGHT}; y += 40) g.fillText('cabin bench line ' + y + ' the quick brown fox jumps over the lazy dog', 10, y);
window.__drawn = true;
</script>`;

async function preparePage(cdp) {
  await cdp.send('Emulation.setDeviceMetricsOverride', {
    width: WIDTH, height: HEIGHT, deviceScaleFactor: 1, mobile: false,
  });
  await cdp.send('Page.navigate', { url: 'data:text/html,' + encodeURIComponent(BUSY_PAGE) });
  await waitFor(
    async () => (await cdp.send('Runtime.evaluate', {
      expression: 'document.readyState === "complete" && window.__drawn === true',
      returnByValue: true,
    })).result.value,
    { timeoutMs: 20000, what: 'the busy page to draw' },
  );
}

async function shots(cdp, count) {
  let bytes = 0;
  let pngBytes = 0;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < count; i++) {
    const { data } = await cdp.send('Page.captureScreenshot', { format: 'png' });
    bytes += data.length;
    pngBytes = Buffer.byteLength(data, 'base64');
  }
  return { seconds: Number(process.hrtime.bigint() - t0) / 1e9, bytes, pngBytes };
}

// The same transfer without Chromium's PNG encoder in the way: a prepared 3 MB string returned
// by Runtime.evaluate, so the bridge's share of a large message shows on its own.
async function bigStrings(cdp, count) {
  let bytes = 0;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < count; i++) {
    const r = await cdp.send('Runtime.evaluate', { expression: 'window.__big', returnByValue: true });
    bytes += r.result.value.length;
  }
  return { seconds: Number(process.hrtime.bigint() - t0) / 1e9, bytes };
}

async function benchBigMessages(pair) {
  log(`Runtime.evaluate returning a 3 MB string: ${SHOTS} each`);
  const acc = { cabin: { seconds: 0, bytes: 0, n: 0 }, direct: { seconds: 0, bytes: 0, n: 0 } };
  for (const side of ['cabin', 'direct']) {
    await pair.sides[side].send('Runtime.evaluate', {
      expression: `window.__big = 'x'.repeat(${3e6}); 0`,
    });
    await bigStrings(pair.sides[side], 3);
  }
  const block = Math.min(10, SHOTS);
  while (acc.cabin.n < SHOTS) {
    const k = Math.min(block, SHOTS - acc.cabin.n);
    for (const side of ['cabin', 'direct']) {
      const r = await bigStrings(pair.sides[side], k);
      acc[side].seconds += r.seconds;
      acc[side].bytes += r.bytes;
      acc[side].n += k;
    }
  }
  const mbps = (a) => a.bytes / 1e6 / a.seconds;
  const out = {
    unit: 'MB/s',
    message_bytes: 3e6,
    cabin: { mb_per_s: mbps(acc.cabin), ms_per_message: (acc.cabin.seconds * 1000) / acc.cabin.n },
    direct: { mb_per_s: mbps(acc.direct), ms_per_message: (acc.direct.seconds * 1000) / acc.direct.n },
  };
  out.ratio = out.cabin.mb_per_s / out.direct.mb_per_s;
  return out;
}

async function benchScreenshots(pair) {
  log(`Page.captureScreenshot ${WIDTH}x${HEIGHT} PNG: ${SHOTS} each`);
  const { cabin, direct } = pair.sides;
  await preparePage(cabin);
  await preparePage(direct);
  await shots(cabin, 3);
  await shots(direct, 3);
  const acc = { cabin: { seconds: 0, bytes: 0, pngBytes: 0, n: 0 },
                direct: { seconds: 0, bytes: 0, pngBytes: 0, n: 0 } };
  const block = Math.min(10, SHOTS);
  while (acc.cabin.n < SHOTS) {
    const k = Math.min(block, SHOTS - acc.cabin.n);
    for (const side of ['cabin', 'direct']) {
      const r = await shots(pair.sides[side], k);
      acc[side].seconds += r.seconds;
      acc[side].bytes += r.bytes;
      acc[side].pngBytes = r.pngBytes;
      acc[side].n += k;
    }
  }
  const mbps = (a) => a.bytes / 1e6 / a.seconds;
  const out = {
    unit: 'MB/s (base64 payload bytes / wall time)',
    message_bytes: Math.round(acc.cabin.bytes / acc.cabin.n),
    png_bytes: acc.cabin.pngBytes,
    cabin: { mb_per_s: mbps(acc.cabin), ms_per_shot: (acc.cabin.seconds * 1000) / acc.cabin.n },
    direct: { mb_per_s: mbps(acc.direct), ms_per_shot: (acc.direct.seconds * 1000) / acc.direct.n },
  };
  out.ratio = out.cabin.mb_per_s / out.direct.mb_per_s;
  out.target = 'ratio >= 0.9';
  out.met = out.ratio >= 0.9;
  return out;
}

// ---------------------------------------------------------------------------------------------
// report

function fmt(v, digits = 1) {
  return Number.isFinite(v) ? v.toFixed(digits) : '-';
}

function signed(v) {
  return (v >= 0 ? '+' : '') + fmt(v);
}

function table(results) {
  const rows = [['metric', 'cabin', 'floor/direct', 'ratio / added', 'target', '']];
  const mark = (ok) => (ok ? 'met' : 'MISSED');
  if (results.create) {
    const r = results.create;
    rows.push(['create→CDP ready p50 (ms)', fmt(r.cabin.p50), fmt(r.floor.p50),
               `${fmt(r.ratio_p50, 2)}x`, '≤ 1.5x', mark(r.met)]);
    rows.push(['create→CDP ready p95 (ms)', fmt(r.cabin.p95), fmt(r.floor.p95),
               `${fmt(r.cabin.p95 / r.floor.p95, 2)}x`, '', '']);
    rows.push(['  of which POST answered p50 (ms)', fmt(r.cabin_post_answered.p50), '', '', '', '']);
  }
  if (results.latency) {
    const r = results.latency;
    rows.push(['Runtime.evaluate RTT p50 (µs)', fmt(r.cabin.p50), fmt(r.direct.p50),
               `${signed(r.added_p50)} µs`, '≤ +50 µs', mark(r.met)]);
    rows.push(['Runtime.evaluate RTT p99 (µs)', fmt(r.cabin.p99), fmt(r.direct.p99),
               `${signed(r.added_p99)} µs`, '', '']);
  }
  if (results.screenshot) {
    const r = results.screenshot;
    rows.push([`screenshot ${(r.message_bytes / 1e6).toFixed(1)} MB msg (MB/s)`,
               fmt(r.cabin.mb_per_s), fmt(r.direct.mb_per_s), `${fmt(r.ratio, 2)}x`, '≥ 0.9x',
               mark(r.met)]);
    rows.push(['screenshot (ms each)', fmt(r.cabin.ms_per_shot), fmt(r.direct.ms_per_shot), '', '', '']);
  }
  if (results.big_message) {
    const r = results.big_message;
    rows.push(['3 MB string via Runtime.evaluate (MB/s)', fmt(r.cabin.mb_per_s), fmt(r.direct.mb_per_s),
               `${fmt(r.ratio, 2)}x`, '', '']);
  }
  if (results.computer) rows.push(...computerRows(results.computer, fmt, mark));
  if (results.vnc) rows.push(...vncRows(results.vnc, fmt, mark));
  if (results.preview) rows.push(...previewRows(results.preview, fmt, mark));
  if (results.egress) rows.push(...egressRows(results.egress, fmt, mark));
  if (results.pause) rows.push(...pauseRows(results.pause, fmt));
  if (results.files) rows.push(...filesRows(results.files, fmt));
  if (results.recording) rows.push(...recordingRows(results.recording, fmt));
  if (results.restart) rows.push(...restartRows(results.restart, fmt));
  if (results.pool) rows.push(...poolRows(results.pool, fmt));
  if (results.fork) rows.push(...forkRows(results.fork, fmt));
  if (results.template) rows.push(...templateRows(results.template, fmt));
  if (results.hibernate) rows.push(...hibernateRows(results.hibernate, fmt));
  if (results.microvm) rows.push(...microvmRows(results.microvm, fmt, mark));
  if (results.threads) rows.push(...threadsRows(results.threads, fmt));
  if (results.scale) rows.push(...scaleRows(results.scale, fmt));
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => String(r[i]).length)));
  return rows
    .map((r) => r.map((c, i) => (i === 0 ? String(c).padEnd(widths[i]) : String(c).padStart(widths[i])))
      .join('  '))
    .join('\n');
}

async function main() {
  const cabin = await getCabind();
  const results = {};
  const env = {
    date: new Date().toISOString(),
    host: os.hostname(),
    cpus: os.cpus().length,
    cpu_model: os.cpus()[0]?.model,
    kernel: os.release(),
    memory_gib: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    chromium: chromiumVersion(),
    quick: opt.quick,
    n: N,
    rtt: RTT,
    shots: SHOTS,
  };
  if (only.has('microvm')) Object.assign(env, { vm_n: VM_N, vm_warmup: VM_WARMUP });
  let failure;
  try {
    const info = await cabin.api('GET', '/v1/info');
    if (info.status !== 200) throw new Error(`GET /v1/info -> ${info.status} ${info.text}`);
    env.cabin_version = info.json.version;
    env.driver = info.json.default_driver;
    env.drivers = info.json.drivers;
    if (only.has('create')) results.create = await benchCreate(cabin);
    if (only.has('latency') || only.has('screenshot')) {
      const pair = await openPair(cabin);
      try {
        if (only.has('latency')) results.latency = await benchLatency(pair);
        if (only.has('screenshot')) {
          results.screenshot = await benchScreenshots(pair);
          results.big_message = await benchBigMessages(pair);
        }
      } finally {
        await pair.close();
      }
    }
    if (only.has('computer')) {
      results.computer = await benchComputer(cabin, {
        shots: opt.quick ? 5 : 20, clicks: opt.quick ? 5 : 20, seconds: opt.quick ? 3 : 5, log,
      });
    }
    if (only.has('vnc')) {
      results.vnc = await benchVnc(cabin, { width: WIDTH, height: HEIGHT, phaseMs: opt.quick ? 3000 : 5000, log });
    }
    if (only.has('preview')) results.preview = await benchPreview(cabin, { ...PREVIEW, log });
    // Its own two cabinds, whatever --url says: the part compares their --threads.
    if (only.has('threads')) results.threads = await benchThreads({ ...THREADS, log });
    // Its own cabind too: the part needs egress flags and a CA of its own.
    if (only.has('egress')) results.egress = await benchEgress({ ...EGRESS, log });
    if (only.has('pause')) results.pause = await benchPause(cabin, { rounds: opt.quick ? 10 : 50, log });
    if (only.has('files')) {
      results.files = await benchFiles(cabin, { mib: opt.quick ? 16 : 64, rounds: opt.quick ? 1 : 3, log });
    }
    if (only.has('recording')) {
      results.recording = await benchRecording(cabin, { seconds: 10, rounds: opt.quick ? 1 : 3, log });
    }
    // Its own cabind, with a pool.
    if (only.has('pool')) results.pool = await benchPool({ rounds: opt.quick ? 5 : 20, log });
    // Its own cabind and site.
    if (only.has('fork')) results.fork = await benchFork({ rounds: opt.quick ? 2 : 5, log });
    // Its own cabinds: templates on, then off; on request only (cold boots take minutes).
    if (only.has('template')) {
      results.template = await benchTemplate({
        copies: opt.quick ? 3 : 10, cold: opt.quick ? 1 : 3, forks: opt.quick ? 1 : 3, log,
      });
    }
    // Its own cabind, with templates; on request only (it boots a template).
    if (only.has('hibernate')) {
      results.hibernate = await benchHibernate({ rounds: opt.quick ? 1 : 3, log });
    }
    // Its own cabind: the part kills and restarts it.
    if (only.has('restart')) {
      results.restart = await benchRestart({ n: opt.quick ? 2 : 4, rounds: opt.quick ? 2 : 5, log });
    }
    // Its own cabinds and gateway, on the sim driver; on request only (10,000 sessions).
    if (only.has('scale')) {
      results.scale = await benchScaleOut({
        sessions: Number(opt['scale-sessions'] ?? (opt.quick ? 1000 : 10000)),
        rounds: opt.quick ? 500 : 2000, log,
      });
    }
    if (only.has('microvm')) {
      results.microvm = await benchMicrovm(cabin, {
        n: VM_N, warmup: VM_WARMUP, width: WIDTH, height: HEIGHT, log,
      });
    }
  } catch (err) {
    failure = err;
    if (cabin.logTail) log(`cabind log:\n${cabin.logTail(30)}`);
  } finally {
    await cabin.stop();
    // The microvm driver's run dir sits next to cabind's.
    if (!cabin.external && cabin.runDir) fs.rmSync(`${cabin.runDir}-vm`, { recursive: true, force: true });
  }
  if (failure) throw failure;

  console.log(`cabin ${env.cabin_version} (${env.driver} driver) vs Xvfb + ${env.chromium} on the host; ` +
              `${env.cpus} CPUs, kernel ${env.kernel}${opt.quick ? ', --quick' : ''}`);
  if (results.microvm) {
    console.log(`microvm driver: ${results.microvm.accelerator}; in the microvm rows floor/direct is ` +
                'the same image booted by hand (minimal QEMU command line, ready through the agent)');
  }
  console.log(table(results));
  fs.mkdirSync(path.dirname(opt.out), { recursive: true });
  fs.writeFileSync(opt.out, JSON.stringify({ env, results }, null, 2) + '\n');
  console.log(`\nwrote ${path.relative(process.cwd(), opt.out)}`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
