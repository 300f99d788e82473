// microVM benchmarks: create→CDP ready on the microvm driver with the time split by boot stage,
// side by side with the same guest image booted by hand (a minimal QEMU command line, no cabind),
// and QEMU's resident memory per running session with Chromium idle.
//
// The split comes from timestamps the host can observe: cabind's log (the microvm driver logs
// "vm started" once QMP answers and every guest console line as it arrives, each with a host
// timestamp) for cabind's sessions, and the console lines read straight from QEMU's stdout for
// the by-hand boots. Guest-side timestamps are not used: under TCG the guest clock falls behind.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import WebSocket from 'ws';

import { BIN_DIR, Cdp, freePort, removeTree, withDeadline } from '../tests/integration/helpers.mjs';
import { percentile, summary } from './stats.mjs';

const READY_TIMEOUT_MS = 300000; // cabind's own bound for a microVM is 180 s by default
const IDLE_MS = 5000; // Chromium idle after ready, before QEMU's RSS is read
const GUEST_AGENT_PORT = 7000;
const TARGET_RATIO = 1.3;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const msSince = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

// ---------------------------------------------------------------------------------------------
// boot markers

// Console lines that mark a stage, first occurrence wins. With `quiet` and printk level 1 the
// kernel prints only errors; on the image's kernel that is one early line (t ≈ 0.7 s guest time),
// and the initramfs prints nothing on success, so "kernel" ends at the first kernel line and the
// rest of the kernel's boot falls into "init".
const CONSOLE_MARKS = [
  ['kernel', /^\[\s*\d+\.\d+\]/],
  ['agent_listening', /\[agent\] listening on /],
  ['xvfb', /\[agent\.supervisor\] Xvfb on display /],
  ['chromium_started', /\[agent\.supervisor\] Chromium started/],
  ['devtools_listening', /^DevTools listening on /],
  ['agent_ready', /\[agent\.supervisor\] ready after /],
];

// Each phase runs from the previous mark that was seen to its own mark; a phase whose mark is
// missing is null and its time lands in the next phase, so the phases always add up to the total.
export const PHASES = [
  ['qemu', 'QEMU start', 'qemu_up'],
  ['kernel', 'kernel', 'kernel'],
  ['init', 'initramfs + init', 'agent_listening'],
  ['xvfb', 'Xvfb', 'xvfb'],
  ['chromium', 'Chromium', 'agent_ready'],
  ['host_ready', 'ready seen by host', 'host_ready'],
  ['cdp', 'CDP attach + getVersion', 'cdp_ready'],
];

function consoleMarks(lines) {
  const marks = {};
  for (const { t, text } of lines) {
    for (const [name, re] of CONSOLE_MARKS) {
      if (marks[name] === undefined && re.test(text)) marks[name] = t;
    }
  }
  return marks;
}

function phases(marks) {
  const out = {};
  let last = 0;
  for (const [name, , mark] of PHASES) {
    if (marks[mark] === undefined) {
      out[name] = null;
    } else {
      out[name] = marks[mark] - last;
      last = marks[mark];
    }
  }
  return out;
}

// cabind's log lines: "2026-11-29T17:53:27.115 info [driver.microvm] [ses_…] vm started: …",
// local time with milliseconds. Times are returned relative to `wall0` (Date.now() at POST).
const LOG_LINE = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}) \S+ \[[^\]]+\] (.*)$/;

function cabindMarks(logText, id, wall0) {
  const marks = {};
  const lines = [];
  const vmPrefix = `[${id}] vm: `;
  for (const line of logText.split('\n')) {
    const m = LOG_LINE.exec(line);
    if (!m) continue;
    const t = new Date(m[1]).getTime() - wall0;
    const msg = m[2];
    if (msg.startsWith(vmPrefix)) lines.push({ t, text: msg.slice(vmPrefix.length) });
    else if (msg.startsWith(`[${id}] vm started:`)) marks.qemu_up ??= t;
    else if (msg.startsWith(`session ${id}: running`)) marks.cabind_running ??= t;
  }
  return { ...consoleMarks(lines), ...marks };
}

// ---------------------------------------------------------------------------------------------
// QEMU processes on this host

function readText(p) {
  try {
    return fs.readFileSync(p, 'utf8');
  } catch {
    return null;
  }
}

// The QEMU of a cabind session: its working directory is <run-dir>-vm/<session id>.
function findQemu(sessionId) {
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    let cwd;
    try {
      cwd = fs.readlinkSync(`/proc/${pid}/cwd`);
    } catch {
      continue;
    }
    if (path.basename(cwd) !== sessionId) continue;
    if ((readText(`/proc/${pid}/comm`) || '').startsWith('qemu')) return Number(pid);
  }
  return null;
}

function vmRssKiB(pid) {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readText(`/proc/${pid}/status`) || '');
  return m ? Number(m[1]) : null;
}

// What the by-hand boot copies from cabind's QEMU so that both boot the same thing the same way:
// the binary, image files, -smp, -m, -accel, -cpu and the kernel command line (which carries
// the host TSC rate cabind measured for TCG guests).
function qemuSettings(pid) {
  const text = readText(`/proc/${pid}/cmdline`);
  if (!text) return null;
  const argv = text.split('\0').filter((a, i, all) => i < all.length - 1 || a !== '');
  const val = (flag) => {
    const i = argv.indexOf(flag);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const kernel = val('-kernel');
  if (!kernel) return null;
  return {
    bin: argv[0],
    kernel,
    initrd: val('-initrd'),
    rootfs: path.join(path.dirname(kernel), 'rootfs.erofs'),
    smp: val('-smp'),
    memory: val('-m'),
    accel: val('-accel'),
    cpu: val('-cpu'),
    append: val('-append'),
    argv,
  };
}

function defaultSettings() {
  const dir = path.resolve(process.env.CABIN_MICROVM_IMAGE_DIR || path.join(BIN_DIR, '..', 'vm-image'));
  // Only when cabind's QEMU could not be read: its TSC rate from /proc/cpuinfo (the kernel
  // needs one under TCG, see docs/microvm.md).
  const mhz = /^cpu MHz\s*:\s*([\d.]+)/m.exec(readText('/proc/cpuinfo') || '');
  return {
    bin: '/usr/bin/qemu-system-x86_64',
    append: 'console=ttyS0 panic=-1 quiet' +
            (mhz ? ` tsc_early_khz=${Math.round(Number(mhz[1]) * 1000)}` : ''),
    kernel: path.join(dir, 'vmlinuz'),
    initrd: path.join(dir, 'initramfs.cpio.gz'),
    rootfs: path.join(dir, 'rootfs.erofs'),
  };
}

// Reads the image files once so that neither side pays for a cold page cache.
async function prefetch(files) {
  for (const f of files) {
    try {
      const fh = await fsp.open(f, 'r');
      const buf = Buffer.alloc(4 << 20);
      try {
        while ((await fh.read(buf, 0, buf.length, null)).bytesRead > 0) { /* discard */ }
      } finally {
        await fh.close();
      }
    } catch {
      // missing here: the boot will say so
    }
  }
}

// ---------------------------------------------------------------------------------------------
// cabind's side

async function cabinSample(cabin, { width, height }) {
  const wall0 = Date.now();
  const t0 = process.hrtime.bigint();
  const r = await cabin.api('POST', '/v1/sessions', { driver: 'microvm', resolution: { width, height } });
  const post = msSince(t0);
  if (r.status !== 201) throw new Error(`POST /v1/sessions {"driver":"microvm"} -> ${r.status} ${r.text}`);
  const s = r.json;
  try {
    // Most markers are logged by now; the tail is read twice in case the session is chatty.
    const logAtPost = cabin.logTail ? cabin.logTail(400) : '';
    const cdp = await Cdp.connect(s.cdp_url, { timeoutMs: READY_TIMEOUT_MS });
    await withDeadline(cdp.send('Browser.getVersion'), READY_TIMEOUT_MS, 'Browser.getVersion');
    const total = msSince(t0);
    await cdp.close();
    const logAfter = cabin.logTail ? cabin.logTail(400) : '';
    const marks = {
      ...cabindMarks(`${logAtPost}\n${logAfter}`, s.id, wall0),
      host_ready: post,
      cdp_ready: total,
    };
    const pid = findQemu(s.id);
    const settings = pid ? qemuSettings(pid) : null;
    await sleep(IDLE_MS);
    const rss = pid ? vmRssKiB(pid) : null;
    return { id: s.id, total, post, marks, phases: phases(marks), rss_kib: rss, qemu_pid: pid, settings };
  } finally {
    await cabin.api('DELETE', `/v1/sessions/${s.id}`).catch(() => {});
  }
}

// ---------------------------------------------------------------------------------------------
// by hand: QEMU started directly, readiness seen through the agent

// One GET /agent/v1/health. `onConnect` fires when the TCP connect succeeds, which QEMU's user
// network does as soon as the machine (hostfwd included) is built, long before the guest is up.
function agentHealth(port, secret, waitMs, onConnect) {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1',
      port,
      path: `/agent/v1/health?wait_ms=${waitMs}`,
      headers: { 'x-cabin-agent-secret': secret },
      agent: false,
      timeout: waitMs + 5000,
    });
    req.on('socket', (sock) => sock.once('connect', onConnect));
    req.on('response', (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        try {
          resolve({ status: res.statusCode, json: JSON.parse(text) });
        } catch {
          reject(new Error(`agent health: HTTP ${res.statusCode} ${text.slice(0, 200)}`));
        }
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('agent health timed out')));
    req.on('error', reject);
    req.end();
  });
}

// CONNECT through the agent to Chromium's DevTools port on the guest's loopback, then a raw
// WebSocket over that tunnel.
function agentTunnel(port, secret, target) {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1',
      port,
      method: 'CONNECT',
      path: target,
      headers: { 'x-cabin-agent-secret': secret, host: target },
      agent: false,
    });
    req.on('connect', (res, socket, head) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        reject(new Error(`CONNECT ${target} -> ${res.statusCode}`));
        return;
      }
      if (head.length) socket.unshift(head);
      resolve(socket);
    });
    req.on('error', reject);
    req.end();
  });
}

async function tunnelCdp(port, secret, devtools) {
  const target = `127.0.0.1:${devtools.port}`;
  const socket = await agentTunnel(port, secret, target);
  const ws = new WebSocket(`ws://${target}${devtools.browser_path}`, {
    createConnection: () => socket,
    perMessageDeflate: false,
  });
  await withDeadline(
    new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
      ws.once('unexpected-response', (_, res) => reject(new Error(`DevTools upgrade -> ${res.statusCode}`)));
    }),
    READY_TIMEOUT_MS,
    'DevTools WebSocket through the agent',
  );
  return new Cdp(ws);
}

export function byHandArgv(q, port) {
  // The same machine and devices as cabind's, without cabin-vmm-wrap and QMP.
  return [
    '-M', 'microvm',
    '-accel', q.accel || 'tcg,thread=multi',
    '-cpu', q.cpu || 'max',
    '-smp', q.smp || '2',
    '-m', q.memory || '2048',
    '-nodefaults', '-no-user-config', '-display', 'none', '-no-reboot',
    '-kernel', q.kernel,
    '-initrd', q.initrd,
    '-append', q.append || 'console=ttyS0 panic=-1 quiet',
    '-drive', `file=${q.rootfs.replaceAll(',', ',,')},if=none,id=root,format=raw,readonly=on`,
    '-device', 'virtio-blk-device,drive=root',
    '-netdev', `user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:${port}-:${GUEST_AGENT_PORT}`,
    '-device', 'virtio-net-device,netdev=n0',
    '-device', 'virtio-rng-device',
    '-fw_cfg', 'name=opt/cabin/config,file=config',
    '-chardev', 'stdio,id=con,signal=off', '-serial', 'chardev:con',
  ];
}

async function byHandSample(q, { width, height }) {
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'cabin-bench-vm-'));
  const secret = randomBytes(16).toString('hex');
  await fsp.writeFile(path.join(dir, 'config'), `secret=${secret}\nwidth=${width}\nheight=${height}\n`,
                      { mode: 0o600 });
  const port = await freePort();
  const argv = byHandArgv(q, port);
  const t0 = process.hrtime.bigint();
  const child = spawn(q.bin, argv, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines = [];
  const stderr = [];
  readline.createInterface({ input: child.stdout }).on('line', (text) => {
    lines.push({ t: msSince(t0), text: text.replace(/\r$/, '') });
  });
  readline.createInterface({ input: child.stderr }).on('line', (l) => stderr.push(l));
  const exited = new Promise((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
    child.once('error', (err) => resolve({ error: err }));
  });
  let gone = null;
  exited.then((r) => { gone = r; });
  const died = () => new Error(`qemu by hand exited (${JSON.stringify(gone)}): ` +
                               [...stderr, ...lines.map((l) => l.text)].slice(-10).join(' | '));
  try {
    let qemuUp;
    let health;
    const deadline = Date.now() + READY_TIMEOUT_MS;
    // As cabind does: a long-polling health request, retried 5 ms after a failure (while the
    // agent does not listen yet, QEMU accepts and the stream ends at once).
    for (;;) {
      if (gone) throw died();
      if (Date.now() >= deadline) throw new Error(`agent not ready after ${READY_TIMEOUT_MS} ms`);
      try {
        const h = await agentHealth(port, secret, 60000, () => { qemuUp ??= msSince(t0); });
        if (h.json?.state === 'ready') {
          health = h.json;
          break;
        }
        if (h.json?.state === 'failed') throw new Error(`agent failed: ${h.json.error}`);
      } catch (err) {
        if (/agent failed/.test(err.message)) throw err;
      }
      await sleep(5);
    }
    const hostReady = msSince(t0);
    const cdp = await tunnelCdp(port, secret, health.devtools);
    await withDeadline(cdp.send('Browser.getVersion'), READY_TIMEOUT_MS, 'Browser.getVersion');
    const total = msSince(t0);
    await cdp.close();
    const marks = { qemu_up: qemuUp, ...consoleMarks(lines), host_ready: hostReady, cdp_ready: total };
    await sleep(IDLE_MS);
    if (gone) throw died();
    const rss = vmRssKiB(child.pid);
    return { total, marks, phases: phases(marks), rss_kib: rss };
  } finally {
    if (!gone) child.kill('SIGKILL');
    await exited;
    await removeTree(dir);
  }
}

// ---------------------------------------------------------------------------------------------
// the benchmark

function phaseSummaries(samples) {
  const out = {};
  for (const [name] of PHASES) {
    const vals = samples.map((s) => s.phases[name]).filter((v) => v !== null);
    out[name] = { ...summary(vals), missing: samples.length - vals.length };
  }
  return out;
}

const median = (vals) => {
  const v = vals.filter((x) => x !== null);
  return v.length ? percentile(v, 50) : null;
};

export async function benchMicrovm(cabin, { n, warmup = 0, width, height, log }) {
  const info = await cabin.api('GET', '/v1/info');
  const driver = (info.json?.drivers || []).find((d) => d.name === 'microvm');
  if (!driver) throw new Error('cabind has no microvm driver');
  if (!driver.available) throw new Error(`microvm driver unavailable: ${driver.unavailable_reason || driver.detail}`);
  const hasLog = typeof cabin.logTail === 'function';
  if (!hasLog) log('microvm: external cabind, no log: the boot split of cabind\'s sessions is not available');

  let q = defaultSettings();
  await prefetch([q.kernel, q.initrd, q.rootfs]);
  log(`microvm create→CDP ready (${driver.detail}): ${n} sessions and ${n} by-hand boots, ` +
      `alternating${warmup ? `, after ${warmup} warm-up each` : ''}; a few minutes`);
  const cabinRuns = [];
  const handRuns = [];
  for (let i = 0; i < warmup + n; i++) {
    const tag = i < warmup ? 'warm-up' : `${i - warmup + 1}/${n}`;
    const c = await cabinSample(cabin, { width, height });
    if (c.settings) q = c.settings;
    log(`  cabin   ${tag}: ${(c.total / 1000).toFixed(1)} s, QEMU RSS ` +
        `${c.rss_kib ? Math.round(c.rss_kib / 1024) : '?'} MiB`);
    const h = await byHandSample(q, { width, height });
    log(`  by hand ${tag}: ${(h.total / 1000).toFixed(1)} s, QEMU RSS ` +
        `${h.rss_kib ? Math.round(h.rss_kib / 1024) : '?'} MiB`);
    if (i < warmup) continue;
    delete c.settings;
    cabinRuns.push(c);
    handRuns.push(h);
  }
  const cabinS = summary(cabinRuns.map((s) => s.total));
  const handS = summary(handRuns.map((s) => s.total));
  const ratio = cabinS.p50 / handS.p50;
  const rssCabin = median(cabinRuns.map((s) => s.rss_kib));
  const rssHand = median(handRuns.map((s) => s.rss_kib));
  return {
    unit: 'ms',
    accelerator: driver.detail,
    n,
    cabin: cabinS,
    by_hand: handS,
    cabin_post_answered: summary(cabinRuns.map((s) => s.post)),
    ratio_p50: ratio,
    target: `ratio_p50 <= ${TARGET_RATIO}`,
    met: ratio <= TARGET_RATIO,
    phases: { cabin: phaseSummaries(cabinRuns), by_hand: phaseSummaries(handRuns) },
    qemu_rss_mib: {
      what: `VmRSS of QEMU ${IDLE_MS / 1000} s after CDP ready, median over the sessions`,
      cabin: rssCabin === null ? null : rssCabin / 1024,
      by_hand: rssHand === null ? null : rssHand / 1024,
    },
    by_hand_command_line: [q.bin, ...byHandArgv(q, 0)].join(' ').replace(/127\.0\.0\.1:0-/, '127.0.0.1:PORT-'),
    samples: { cabin: cabinRuns, by_hand: handRuns },
  };
}

// Table rows in bench.mjs's layout: metric, cabin, by hand, ratio, target, verdict.
export function microvmRows(r, fmt, mark) {
  const rows = [];
  rows.push(['microvm create→CDP ready p50 (ms)', fmt(r.cabin.p50), fmt(r.by_hand.p50),
             `${fmt(r.ratio_p50, 2)}x`, `≤ ${TARGET_RATIO}x`, mark(r.met)]);
  rows.push(['microvm create→CDP ready p95 (ms)', fmt(r.cabin.p95), fmt(r.by_hand.p95),
             `${fmt(r.cabin.p95 / r.by_hand.p95, 2)}x`, '', '']);
  for (const [name, label] of PHASES) {
    const c = r.phases.cabin[name];
    const h = r.phases.by_hand[name];
    const miss = (p) => (p.missing ? ` (${p.missing} missing)` : '');
    rows.push([`  ${label} p50 (ms)`, fmt(c.p50) + miss(c), fmt(h.p50) + miss(h), '', '', '']);
  }
  const m = r.qemu_rss_mib;
  rows.push(['microvm QEMU RSS, Chromium idle (MiB)', fmt(m.cabin, 0), fmt(m.by_hand, 0),
             m.cabin && m.by_hand ? `${fmt(m.cabin / m.by_hand, 2)}x` : '', '', '']);
  return rows;
}
