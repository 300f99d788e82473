// The live view's RFB server against x11vnc on the same display in the same run: a scripted
// scene (a scrolling page, then typing, then idle) watched by 1 and by 5 viewers. The viewers
// (bench/vnc_viewer.mjs) run inside the sandbox, so both servers are reached over its loopback.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { chromium } from 'playwright-core';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const VIEWER_SRC = fs.readFileSync(path.join(HERE, 'vnc_viewer.mjs'), 'utf8');
const PHASES = ['scroll', 'typing', 'idle'];
const X11VNC_PORT = 5901;

// A long page of coloured rows; runScene scrolls it 12 px per animation frame for one phase,
// then types a character every 50 ms into a (not focused, so no blinking caret) text box.
const SCENE = `<!doctype html><title>scene</title>
<style>body{margin:0;font:16px sans-serif} .r{height:32px;line-height:32px;padding-left:8px}
#t{position:fixed;right:20px;top:20px;width:420px;height:220px;font-size:18px}</style>
<textarea id=t></textarea><div id=rows></div>
<script>
const rows = document.getElementById('rows');
for (let i = 0; i < 3000; i++) {
  const d = document.createElement('div');
  d.className = 'r';
  d.textContent = 'Row ' + i + ' — ' + 'the quick brown fox jumps over the lazy dog '.repeat(3);
  d.style.background = 'hsl(' + (i * 37 % 360) + ',60%,85%)';
  rows.appendChild(d);
}
window.runScene = (t0, ms) => {
  const text = 'The quick brown fox jumps over the lazy dog. ';
  let i = 0;
  const frame = () => {
    const t = Date.now() - t0;
    if (t < ms) {
      if (t >= 0) window.scrollBy(0, 12);
      requestAnimationFrame(frame);
    }
  };
  requestAnimationFrame(frame);
  const typing = setInterval(() => {
    const t = Date.now() - t0;
    if (t >= ms && t < 2 * ms) document.getElementById('t').value += text[i++ % text.length];
    if (t >= 2 * ms) clearInterval(typing);
  }, 50);
};
</script>`;

async function exec(cabin, id, argv, extra = {}) {
  const r = await cabin.api('POST', `/v1/sessions/${id}/exec`, { argv, timeout_ms: 30000, ...extra });
  if (r.status !== 200) throw new Error(`exec ${argv[0]} -> ${r.status} ${r.text}`);
  return r.json;
}

async function pidOf(cabin, id, name) {
  const r = await exec(cabin, id, ['pgrep', '-x', name]);
  const pid = Number(r.stdout.trim().split('\n')[0]);
  if (!pid) throw new Error(`no ${name} process in the sandbox`);
  return pid;
}

async function runOnce(cabin, s, page, { port, pid, viewers, phaseMs }) {
  await page.evaluate(() => {
    window.scrollTo(0, 0);
    document.getElementById('t').value = '';
  });
  // Time for the viewers to connect and take their first full frame before the scene starts.
  const t0 = Date.now() + 3000;
  await page.evaluate(([a, b]) => window.runScene(a, b), [t0, phaseMs]);
  const r = await exec(cabin, s.id, ['node', '--input-type=module', '-'], {
    stdin: VIEWER_SRC,
    timeout_ms: 3000 + PHASES.length * phaseMs + 20000,
    env: {
      PORT: String(port), VIEWERS: String(viewers), T0: String(t0), PHASE_MS: String(phaseMs),
      PHASES: PHASES.join(','), SERVER_PID: String(pid),
    },
  });
  if (r.exit_code !== 0) throw new Error(`viewers failed: ${r.stderr}`);
  const out = JSON.parse(r.stdout);
  if (out.errors.length) throw new Error(`viewer errors: ${out.errors.join('; ')}`);
  const secs = phaseMs / 1000;
  const phases = {};
  for (const p of PHASES) {
    const m = out.phases[p];
    phases[p] = {
      fps: m.updates_per_viewer / secs,
      kib_per_s_per_viewer: m.bytes_per_viewer / 1024 / secs,
      updates_per_viewer: m.updates_per_viewer,
      cpu_percent: (100 * m.cpu_s) / secs,
    };
  }
  return phases;
}

export async function benchVnc(cabin, { width = 1280, height = 800, phaseMs = 5000, log }) {
  const s = (await cabin.api('POST', '/v1/sessions', { resolution: { width, height } })).json;
  if (!s?.id) throw new Error('could not create a session for the vnc bench');
  const browser = await chromium.connectOverCDP(s.cdp_url);
  const results = { width, height, phase_ms: phaseMs, runs: [] };
  try {
    const page = browser.contexts()[0].pages()[0];
    await page.setContent(SCENE);
    await page.bringToFront();
    const display = (await exec(cabin, s.id, ['sh', '-c', 'ls /tmp/.X11-unix | sed -n "s/^X//p" | head -1']))
      .stdout.trim();
    const cabinPid = await pidOf(cabin, s.id, 'cabin-agent');
    const servers = [{ name: 'cabin', port: 5900, pid: cabinPid }];
    const x11vnc = await exec(cabin, s.id, [
      'x11vnc', '-display', `:${display}`, '-localhost', '-rfbport', String(X11VNC_PORT), '-shared',
      '-forever', '-nopw', '-bg', '-quiet', '-o', '/tmp/x11vnc.log']);
    if (x11vnc.exit_code === 0) {
      servers.push({ name: 'x11vnc', port: X11VNC_PORT, pid: await pidOf(cabin, s.id, 'x11vnc') });
    } else {
      log(`x11vnc did not start (${x11vnc.stderr.trim().slice(0, 200)}): measuring cabin alone`);
    }
    for (const viewers of [1, 5]) {
      for (const server of servers) {
        log(`vnc: ${server.name}, ${viewers} viewer(s)`);
        const phases = await runOnce(cabin, s, page, { ...server, viewers, phaseMs });
        results.runs.push({ server: server.name, viewers, phases });
      }
    }
  } finally {
    await browser.close().catch(() => {});
    await cabin.api('DELETE', `/v1/sessions/${s.id}`);
  }
  const get = (server, viewers) => results.runs.find((r) => r.server === server && r.viewers === viewers);
  const c1 = get('cabin', 1);
  const x1 = get('x11vnc', 1);
  results.targets = {
    scroll_fps_ge_30: c1.phases.scroll.fps >= 30,
    bytes_le_x11vnc: x1 ? c1.phases.scroll.kib_per_s_per_viewer + c1.phases.typing.kib_per_s_per_viewer <=
                          x1.phases.scroll.kib_per_s_per_viewer + x1.phases.typing.kib_per_s_per_viewer
                        : null,
    idle_cpu_le_1_percent: c1.phases.idle.cpu_percent <= 1,
  };
  return results;
}

export function vncRows(r, fmt, mark) {
  const rows = [];
  for (const run of r.runs) {
    const p = run.phases;
    const label = `vnc ${run.server} ×${run.viewers}`;
    rows.push([`${label}: scroll fps / KiB/s per viewer`,
               `${fmt(p.scroll.fps)} / ${fmt(p.scroll.kib_per_s_per_viewer, 0)}`, '', '', '', '']);
    rows.push([`${label}: typing fps / KiB/s per viewer`,
               `${fmt(p.typing.fps)} / ${fmt(p.typing.kib_per_s_per_viewer, 0)}`, '', '', '', '']);
    rows.push([`${label}: CPU % scroll / typing / idle`,
               `${fmt(p.scroll.cpu_percent)} / ${fmt(p.typing.cpu_percent)} / ${fmt(p.idle.cpu_percent)}`,
               '', '', '', '']);
    rows.push([`${label}: idle updates per viewer`, fmt(p.idle.updates_per_viewer, 0), '', '', '', '']);
  }
  rows.push(['vnc: cabin scroll fps (1 viewer)', '', '', '', '≥ 30', mark(r.targets.scroll_fps_ge_30)]);
  if (r.targets.bytes_le_x11vnc !== null) {
    rows.push(['vnc: cabin bytes ≤ x11vnc (1 viewer)', '', '', '', '≤ 1x', mark(r.targets.bytes_le_x11vnc)]);
  }
  rows.push(['vnc: cabin idle CPU (1 viewer)', '', '', '', '≤ 1 %', mark(r.targets.idle_cpu_le_1_percent)]);
  return rows;
}
