// Computer-use benchmarks, side by side in one run: screenshots through cabind (and inside the
// agent) against CDP Page.captureScreenshot of the same screen and against the usual container
// stack (ImageMagick `import`, `xwd` piped to `convert`) on a host Xvfb; click-to-event latency
// against `xdotool click`; the frame stream's rate and CPU with one and ten viewers against CDP
// Page.startScreencast.
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import { promisify } from 'node:util';

import { waitFor, wsOpen } from '../tests/integration/helpers.mjs';
import { pageTarget, startHostBrowser } from './host_chromium.mjs';
import { summary } from './stats.mjs';

const run = promisify(execFile);

// A page like the ones agents look at: text, boxes, a form.
function uiPage(width, height) {
  const para = 'Cabin gives every session its own computer. Agents click, type and look; people ' +
    'watch and take over. The quick brown fox jumps over the lazy dog 0123456789. ';
  let body = '';
  for (let i = 0; i < Math.ceil(height / 90); i++) {
    body += `<h3 style="color:hsl(${(i * 37) % 360},60%,40%)">Section ${i}</h3><p>${para.repeat(3)}</p>`;
  }
  return `<!doctype html><title>ui</title><style>body{margin:0;font:15px sans-serif;width:${width}px}
  .side{position:fixed;right:0;top:0;width:220px;height:100%;background:#eef}
  .btn{display:inline-block;padding:6px 12px;margin:4px;background:#36c;color:#fff;border-radius:4px}
  </style><div class=side>${'<div class=btn>Action</div>'.repeat(12)}<input value="search"></div>
  <div style="padding:8px 240px 8px 8px">${body}</div>
  <script>window.__t = 0; addEventListener('mousedown', () => {
    window.__t = performance.timeOrigin + performance.now(); }, true);</script>`;
}

export const ANIMATION = `<!doctype html><title>anim</title><style>body{margin:0;background:#fafafa}
#b{position:absolute;width:160px;height:160px;background:#c33;border-radius:20px}</style>
<div id=b></div><h1 id=n style="position:absolute;left:40px;top:400px">0</h1><script>
let i = 0; function step() { i++; const b = document.getElementById('b');
b.style.left = (100 + (i * 7) % 900) + 'px'; b.style.top = (100 + (i * 3) % 250) + 'px';
document.getElementById('n').textContent = i; requestAnimationFrame(step); } step();</script>`;

const nowMs = () => performance.timeOrigin + performance.now();

export async function setContent(cdp, html) {
  await cdp.send('Page.enable');
  const { frameTree } = await cdp.send('Page.getFrameTree');
  await cdp.send('Page.setDocumentContent', { frameId: frameTree.frame.id, html });
  // Two animation frames: the new content is on the screen, not only in the DOM.
  await cdp.send('Runtime.evaluate', {
    expression: 'new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))',
    awaitPromise: true,
  });
}

async function timeIt(n, fn) {
  await fn();
  await fn();
  const out = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn();
    out.push(performance.now() - t0);
  }
  return out;
}

// grab + encode inside the agent, from the Server-Timing header cabind passes on.
function agentMs(res) {
  const h = res.headers.get('server-timing') || '';
  let total = 0;
  for (const m of h.matchAll(/dur=([0-9.]+)/g)) total += Number(m[1]);
  return total;
}

async function screenshotsAt(cabin, width, height, shots, log) {
  log(`screenshots at ${width}x${height}: ${shots} each way`);
  const auth = { authorization: `Bearer ${cabin.key}` };
  const r = await cabin.api('POST', '/v1/sessions', { resolution: { width, height } });
  if (r.status !== 201) throw new Error(`create -> ${r.status} ${r.text}`);
  const s = r.json;
  const hb = await startHostBrowser({ width, height });
  const cdp = await pageTarget(`${cabin.base}/v1/sessions/${s.id}/json/list`, { headers: auth });
  const host = await pageTarget(`http://127.0.0.1:${hb.port}/json/list`);
  try {
    await setContent(cdp, uiPage(width, height));
    await setContent(host, uiPage(width, height));
    const out = {};
    for (const format of ['png', 'jpeg']) {
      const inside = [];
      const q = format === 'jpeg' ? '&quality=80' : '';
      const cabinMs = await timeIt(shots, async () => {
        const res = await fetch(`${cabin.base}/v1/sessions/${s.id}/screenshot?format=${format}${q}`,
          { headers: auth });
        if (res.status !== 200) throw new Error(`screenshot -> ${res.status}`);
        await res.arrayBuffer();
        inside.push(agentMs(res));
      });
      const params = format === 'jpeg' ? { format, quality: 80 } : { format };
      const cdpMs = await timeIt(shots, () => cdp.send('Page.captureScreenshot', params));
      const env = { ...process.env, DISPLAY: hb.display };
      const opts = { env, encoding: 'buffer', maxBuffer: 256 << 20 };
      const importMs = await timeIt(shots, () =>
        run('import', ['-window', 'root', ...(format === 'jpeg' ? ['-quality', '80'] : []),
          `${format}:-`], opts));
      const xwdMs = await timeIt(shots, () =>
        run('sh', ['-c', `xwd -root -silent | convert xwd:- ${format === 'jpeg' ? '-quality 80 ' : ''}${format}:-`], opts));
      const c = summary(cabinMs);
      const d = summary(cdpMs);
      out[format] = {
        unit: 'ms',
        cabind: c,
        agent: summary(inside.slice(2)),
        cdp: d,
        import: summary(importMs),
        xwd_convert: summary(xwdMs),
        cdp_over_cabind_p50: d.p50 / c.p50,
        cdp_over_agent_p50: d.p50 / summary(inside.slice(2)).p50,
      };
    }
    return out;
  } finally {
    await cdp.close();
    await host.close();
    await cabin.api('DELETE', `/v1/sessions/${s.id}`);
    await hb.stop();
  }
}

async function clickLatency(cabin, clicks, log) {
  log(`click→event: ${clicks} clicks each way`);
  const width = 1280;
  const height = 800;
  const auth = { authorization: `Bearer ${cabin.key}` };
  const r = await cabin.api('POST', '/v1/sessions', { resolution: { width, height } });
  const s = r.json;
  const hb = await startHostBrowser({ width, height });
  const cdp = await pageTarget(`${cabin.base}/v1/sessions/${s.id}/json/list`, { headers: auth });
  const host = await pageTarget(`http://127.0.0.1:${hb.port}/json/list`);
  const seen = async (side, since) => {
    let t = 0;
    await waitFor(async () => {
      const v = await side.send('Runtime.evaluate', { expression: 'window.__t', returnByValue: true });
      t = v.result.value;
      return t > since;
    }, { intervalMs: 1, timeoutMs: 5000, what: 'the mousedown' });
    return t;
  };
  try {
    await setContent(cdp, uiPage(width, height));
    await setContent(host, uiPage(width, height));
    const env = { ...process.env, DISPLAY: hb.display };
    await run('xdotool', ['mousemove', '500', '400'], { env });
    const cabinMs = [];
    const xdoMs = [];
    for (let i = 0; i < clicks + 2; i++) {
      let t0 = nowMs();
      const res = await cabin.api('POST', `/v1/sessions/${s.id}/computer`,
        { action: 'left_click', coordinate: [500, 400] });
      if (res.status !== 200) throw new Error(`click -> ${res.status} ${res.text}`);
      const tc = (await seen(cdp, t0)) - t0;
      t0 = nowMs();
      await run('xdotool', ['click', '1'], { env });
      const tx = (await seen(host, t0)) - t0;
      // Apart, so the page never sees a double click.
      await new Promise((res2) => setTimeout(res2, 550));
      if (i >= 2) {
        cabinMs.push(tc);
        xdoMs.push(tx);
      }
    }
    const c = summary(cabinMs);
    return { unit: 'ms', cabin: c, xdotool: summary(xdoMs), target: 'cabin p50 <= 5', met: c.p50 <= 5 };
  } finally {
    await cdp.close();
    await host.close();
    await cabin.api('DELETE', `/v1/sessions/${s.id}`);
    await hb.stop();
  }
}

// CPU jiffies (user + system) used so far by `root` and every process below it: cabind, the
// sandbox, cabin-agent and the browser. Processes that ended in between are not counted.
function treeJiffies(root) {
  const procs = new Map();
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      procs.set(Number(d), { ppid: Number(f[1]), jiffies: Number(f[11]) + Number(f[12]) });
    } catch {
      // gone
    }
  }
  const inTree = (pid) => {
    for (let p = pid; p > 1; p = procs.get(p)?.ppid ?? 0) if (p === root) return true;
    return false;
  };
  let total = 0;
  for (const [pid, p] of procs) if (inTree(pid)) total += p.jiffies;
  return total;
}

// CPU (% of one core) of cabind and its sessions while `during` runs.
async function measureCpu(root, seconds, during) {
  const j0 = treeJiffies(root);
  const t0 = performance.now();
  const result = await during(seconds);
  const s = (performance.now() - t0) / 1000;
  return { ...result, cpu_pct: ((treeJiffies(root) - j0) / 100 / s) * 100 };
}

async function frameStream(cabin, seconds, log) {
  log(`frame stream: ${seconds} s each with 0, 1 and 10 viewers, and CDP screencast`);
  const auth = { authorization: `Bearer ${cabin.key}` };
  const r = await cabin.api('POST', '/v1/sessions', { resolution: { width: 1280, height: 800 } });
  const s = r.json;
  const cdp = await pageTarget(`${cabin.base}/v1/sessions/${s.id}/json/list`, { headers: auth });
  const url = `${cabin.base.replace('http', 'ws')}/v1/sessions/${s.id}/frames?format=jpeg&quality=80&fps=30`;
  const viewers = (n) => async (secs) => {
    const counts = new Array(n).fill(0);
    const sockets = await Promise.all(counts.map((_, i) => wsOpen(url, {
      headers: auth, onMessage: (d, binary) => { if (binary) counts[i]++; },
    })));
    await new Promise((res) => setTimeout(res, secs * 1000));
    for (const ws of sockets) ws.close();
    return { fps_per_viewer: summary(counts.map((c) => c / secs)).p50 };
  };
  try {
    await setContent(cdp, ANIMATION);
    const idle = await measureCpu(cabin.pid, seconds, async (secs) => {
      await new Promise((res) => setTimeout(res, secs * 1000));
      return {};
    });
    const one = await measureCpu(cabin.pid, seconds, viewers(1));
    const ten = await measureCpu(cabin.pid, seconds, viewers(10));
    const cast = await measureCpu(cabin.pid, seconds, async (secs) => {
      let n = 0;
      cdp.on('Page.screencastFrame', (p) => {
        n++;
        cdp.send('Page.screencastFrameAck', { sessionId: p.sessionId }).catch(() => {});
      });
      await cdp.send('Page.startScreencast', { format: 'jpeg', quality: 80 });
      await new Promise((res) => setTimeout(res, secs * 1000));
      await cdp.send('Page.stopScreencast');
      return { fps_per_viewer: n / secs };
    });
    return {
      seconds,
      animating_no_viewer_cpu_pct: idle.cpu_pct,
      one_viewer: one,
      ten_viewers: ten,
      cdp_screencast: cast,
    };
  } finally {
    await cdp.close();
    await cabin.api('DELETE', `/v1/sessions/${s.id}`);
  }
}

export async function benchComputer(cabin, { shots, clicks, seconds, log }) {
  const out = { screenshots: {} };
  for (const [w, h] of [[1280, 800], [1920, 1080]]) {
    out.screenshots[`${w}x${h}`] = await screenshotsAt(cabin, w, h, shots, log);
  }
  out.click = await clickLatency(cabin, clicks, log);
  // CPU is read from cabind's process tree, which only a cabind started here has.
  if (cabin.pid) out.frames = await frameStream(cabin, seconds, log);
  const small = out.screenshots['1280x800'];
  out.targets = {
    agent_jpeg_p50_le_15ms: small.jpeg.agent.p50 <= 15,
    agent_png_p50_le_30ms: small.png.agent.p50 <= 30,
    three_x_faster_than_cdp: small.png.cdp_over_agent_p50 >= 3 && small.jpeg.cdp_over_agent_p50 >= 3,
    click_p50_le_5ms: out.click.met,
  };
  return out;
}

export function computerRows(r, fmt, mark) {
  const rows = [];
  for (const [res, byFormat] of Object.entries(r.screenshots)) {
    for (const [format, m] of Object.entries(byFormat)) {
      rows.push([`screenshot ${format} ${res} p50/p95 (ms): cabind | agent`,
        `${fmt(m.cabind.p50, 1)}/${fmt(m.cabind.p95, 1)} | ${fmt(m.agent.p50, 1)}`,
        `cdp ${fmt(m.cdp.p50, 1)}/${fmt(m.cdp.p95, 1)}; import ${fmt(m.import.p50, 0)}; xwd ${fmt(m.xwd_convert.p50, 0)}`,
        `cdp/agent ${fmt(m.cdp_over_agent_p50, 1)}x, cdp/cabind ${fmt(m.cdp_over_cabind_p50, 1)}x`,
        res === '1280x800' ? (format === 'png' ? 'agent ≤ 30, ≥ 3x' : 'agent ≤ 15, ≥ 3x') : '',
        res === '1280x800'
          ? mark(m.cdp_over_agent_p50 >= 3 && m.agent.p50 <= (format === 'png' ? 30 : 15)) : '']);
    }
  }
  rows.push(['click→event p50/p95 (ms)', `${fmt(r.click.cabin.p50, 1)}/${fmt(r.click.cabin.p95, 1)}`,
    `xdotool ${fmt(r.click.xdotool.p50, 1)}/${fmt(r.click.xdotool.p95, 1)}`,
    `${fmt(r.click.xdotool.p50 / r.click.cabin.p50, 1)}x faster`, '≤ 5 ms', mark(r.click.met)]);
  const f = r.frames;
  if (!f) return rows;
  rows.push(['frames/s per viewer (1 | 10 viewers)', `${fmt(f.one_viewer.fps_per_viewer, 1)} | ${fmt(f.ten_viewers.fps_per_viewer, 1)}`,
    `cdp screencast ${fmt(f.cdp_screencast.fps_per_viewer, 1)}`, '', '', '']);
  rows.push(['cabind+session CPU % (animating: 0 | 1 | 10 viewers)',
    `${fmt(f.animating_no_viewer_cpu_pct, 0)} | ${fmt(f.one_viewer.cpu_pct, 0)} | ${fmt(f.ten_viewers.cpu_pct, 0)}`,
    `cdp screencast ${fmt(f.cdp_screencast.cpu_pct, 0)}`, '', '', '']);
  return rows;
}
