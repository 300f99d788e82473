// Recording's CPU cost: a namespace session records its 1280x800 screen at 15 fps while a page
// animates (POST /recordings: the agent's capture piped into ffmpeg/libx264 in the sandbox),
// side by side with what a hand-made container does, ffmpeg's own x11grab on the same display
// with the same encoder settings, run in the same sandbox through exec. CPU is that of cabind's
// process and the session's cgroup in % of one core, less what they use meanwhile without recording
// (the page's own animation); each side is probed with ffprobe. Reported: the medians and ratio.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { sessionPids } from '../tests/integration/helpers.mjs';
import { summary } from './stats.mjs';

// CPU seconds used so far by cabind's own process and by the session's processes, each with
// the children it has reaped (an ffmpeg that ended, an exec'd command): the sandbox's processes
// are not cabind's descendants, so a process tree would miss them.
function cpuSeconds(cabindPid, sessionId) {
  const times = (pid, reaped) => {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return (Number(f[11]) + Number(f[12]) + (reaped ? Number(f[13]) + Number(f[14]) : 0)) / 100;
    } catch {
      return 0;  // ended meanwhile
    }
  };
  let total = times(cabindPid, false);
  for (const pid of sessionPids(sessionId)) total += times(pid, true);
  return total;
}

// CPU (% of one core) of cabind and the session while `during` runs.
async function measureCpu(cabindPid, sessionId, seconds, during) {
  const c0 = cpuSeconds(cabindPid, sessionId);
  const t0 = performance.now();
  await during(seconds);
  const s = (performance.now() - t0) / 1000;
  return { cpu_pct: ((cpuSeconds(cabindPid, sessionId) - c0) / s) * 100 };
}

const PAGE = `<!doctype html><style>body{margin:0;font:20px sans-serif;
  background:linear-gradient(90deg,#fde,#def)}#b{position:absolute;top:200px;width:160px;
  height:160px;background:#36c}</style><p>${'Cabin records this page. '.repeat(40)}</p>
  <div id=b></div><script>let x = 0; (function f() { x = (x + 6) % 1100;
  b.style.left = x + 'px'; requestAnimationFrame(f); })();</script>`;

function probe(file) {
  const out = JSON.parse(execFileSync('ffprobe', ['-v', 'error', '-count_frames', '-select_streams',
    'v:0', '-show_entries', 'stream=nb_read_frames:format=duration', '-of', 'json', file]).toString());
  return { frames: Number(out.streams[0].nb_read_frames), duration: Number(out.format.duration),
           bytes: fs.statSync(file).size };
}

export async function benchRecording(cabin, { seconds = 10, rounds = 3, log = () => {} } = {}) {
  if (!cabin.pid) throw new Error('the recording part needs a cabind of its own (no --url)');
  const { chromium } = await import('playwright-core');
  const made = await cabin.api('POST', '/v1/sessions', { resolution: { width: 1280, height: 800 } });
  if (made.status !== 201) throw new Error(`create -> ${made.status} ${made.text}`);
  const s = made.json;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-bench-rec-'));
  const browser = await chromium.connectOverCDP(s.cdp_url);
  const pct = { idle: [], cabin: [], x11grab: [] };
  const files = {};
  try {
    const page = browser.contexts()[0].pages()[0];
    await page.setContent(PAGE);
    await page.bringToFront();
    const wait = (secs) => new Promise((r) => setTimeout(r, secs * 1000));
    for (let i = 0; i < rounds; i++) {
      pct.idle.push((await measureCpu(cabin.pid, s.id, seconds, wait)).cpu_pct);

      let rid = '';
      pct.cabin.push((await measureCpu(cabin.pid, s.id, seconds, async (secs) => {
        const r = await cabin.api('POST', `/v1/sessions/${s.id}/recordings`,
                                  { fps: 15, quality: 68, max_duration_s: secs });
        if (r.status !== 201) throw new Error(`record -> ${r.status} ${r.text}`);
        rid = r.json.id;
        await wait(secs);
        const stop = await cabin.api('POST', `/v1/sessions/${s.id}/recordings/${rid}/stop`);
        if (stop.status !== 200) throw new Error(`stop -> ${stop.status} ${stop.text}`);
      })).cpu_pct);
      const res = await fetch(`${cabin.base}/v1/sessions/${s.id}/recordings/${rid}`,
                              { headers: { authorization: `Bearer ${cabin.key}` } });
      files.cabin = path.join(dir, 'cabin.mp4');
      fs.writeFileSync(files.cabin, Buffer.from(await res.arrayBuffer()));

      // crf 23: what quality 68 maps to.
      pct.x11grab.push((await measureCpu(cabin.pid, s.id, seconds, async (secs) => {
        const r = await cabin.api('POST', `/v1/sessions/${s.id}/exec`, {
          // The sandbox's display, as its X socket names it.
          argv: ['sh', '-c', `x=$(ls /tmp/.X11-unix | head -n1); \
            ffmpeg -hide_banner -loglevel error -f x11grab -draw_mouse 1 -framerate 15 \
            -video_size 1280x800 -i ":\${x#X}" -t ${secs} -c:v libx264 -preset veryfast -crf 23 \
            -pix_fmt yuv420p -g 30 -movflags +frag_keyframe+empty_moov -y /tmp/x11grab.mp4`],
          timeout_ms: (secs + 30) * 1000,
        });
        if (r.status !== 200 || r.json.exit_code !== 0) throw new Error(`x11grab -> ${r.text}`);
      })).cpu_pct);
      const got = await fetch(`${cabin.base}/v1/sessions/${s.id}/files?path=/tmp/x11grab.mp4`,
                              { headers: { authorization: `Bearer ${cabin.key}` } });
      files.x11grab = path.join(dir, 'x11grab.mp4');
      fs.writeFileSync(files.x11grab, Buffer.from(await got.arrayBuffer()));
      log(`recording: round ${i + 1} of ${rounds}`);
    }
    const idle = summary(pct.idle).p50;
    return {
      seconds, rounds, idle_pct: idle,
      cabin: { ...summary(pct.cabin), cost_pct: summary(pct.cabin).p50 - idle, ...probe(files.cabin) },
      x11grab: { ...summary(pct.x11grab), cost_pct: summary(pct.x11grab).p50 - idle, ...probe(files.x11grab) },
    };
  } finally {
    await browser.close();
    await cabin.api('DELETE', `/v1/sessions/${s.id}`);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

export function recordingRows(r, fmt) {
  return [
    ['recording 1280x800 @15 fps, CPU over idle (% core)', fmt(r.cabin.cost_pct),
     fmt(r.x11grab.cost_pct), `${fmt(r.cabin.cost_pct / r.x11grab.cost_pct, 2)}x`, '', ''],
    [`recording ${r.seconds} s: frames / MB`, `${r.cabin.frames} / ${fmt(r.cabin.bytes / 1e6, 2)}`,
     `${r.x11grab.frames} / ${fmt(r.x11grab.bytes / 1e6, 2)}`, '', '', ''],
  ];
}
