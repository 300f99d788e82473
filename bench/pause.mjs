// Pause and resume: POST /pause and /resume of a namespace session (the cgroup freezer), side by
// side with what a hand-made setup does to a browser on the host, SIGSTOP and SIGCONT of its
// process group, waiting until every process has stopped (or runs again). Each resume is timed
// until a CDP call on an open page connection answers: the browser really goes on. Reported:
// p50 and p95 of each, in milliseconds, and their ratios.
import fs from 'node:fs';

import { pageTarget, spawnChromium, startXvfb, waitDevtools } from './host_chromium.mjs';
import { summary } from './stats.mjs';

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

// The pids of a process group, and whether each is stopped (state T).
function group(pgid) {
  const out = [];
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(f[2]) === pgid) out.push(f[0] === 'T');
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

async function until(cond) {
  while (!cond()) await new Promise((r) => setImmediate(r));
}

async function hostRounds(rounds, log) {
  const xvfb = await startXvfb(1280, 800);
  const chromium = await spawnChromium(xvfb.display);
  try {
    await waitDevtools(chromium.port, { child: chromium.child });
    const page = await pageTarget(`http://127.0.0.1:${chromium.port}/json/list`);
    const pause = [];
    const resume = [];
    const pgid = chromium.child.pid;
    for (let i = 0; i < rounds; i++) {
      let t0 = process.hrtime.bigint();
      process.kill(-pgid, 'SIGSTOP');
      await until(() => group(pgid).every((stopped) => stopped));
      pause.push(ms(t0));
      t0 = process.hrtime.bigint();
      process.kill(-pgid, 'SIGCONT');
      await page.send('Runtime.evaluate', { expression: '1', returnByValue: true });
      resume.push(ms(t0));
    }
    await page.close();
    log(`host: ${rounds} rounds`);
    return { pause: summary(pause), resume: summary(resume) };
  } finally {
    await chromium.stop();
    await xvfb.stop();
  }
}

async function cabinRounds(cabin, rounds, log) {
  const made = await cabin.api('POST', '/v1/sessions', {});
  if (made.status !== 201) throw new Error(`create -> ${made.status} ${made.text}`);
  const s = made.json;
  try {
    const page = await pageTarget(`${cabin.base}/v1/sessions/${s.id}/json/list`, {
      headers: { authorization: `Bearer ${cabin.key}` },
    });
    const pause = [];
    const resume = [];
    for (let i = 0; i < rounds; i++) {
      let t0 = process.hrtime.bigint();
      const p = await cabin.api('POST', `/v1/sessions/${s.id}/pause`);
      if (p.json?.status !== 'paused') throw new Error(`pause -> ${p.status} ${p.text}`);
      pause.push(ms(t0));
      t0 = process.hrtime.bigint();
      const r = await cabin.api('POST', `/v1/sessions/${s.id}/resume`);
      if (r.json?.status !== 'running') throw new Error(`resume -> ${r.status} ${r.text}`);
      await page.send('Runtime.evaluate', { expression: '1', returnByValue: true });
      resume.push(ms(t0));
    }
    await page.close();
    log(`cabin: ${rounds} rounds`);
    return { pause: summary(pause), resume: summary(resume) };
  } finally {
    await cabin.api('DELETE', `/v1/sessions/${s.id}`);
  }
}

export async function benchPause(cabin, { rounds = 50, log = () => {} } = {}) {
  const cabinSide = await cabinRounds(cabin, rounds, log);
  const host = await hostRounds(rounds, log);
  return { rounds, cabin: cabinSide, host };
}

export function pauseRows(r, fmt) {
  const row = (what, key, p) => [`${what} ${p} (ms)`, fmt(r.cabin[key][p], 1), fmt(r.host[key][p], 1),
                                  `${fmt(r.cabin[key][p] / r.host[key][p], 2)}x`, '', ''];
  return [row('pause', 'pause', 'p50'), row('pause', 'pause', 'p95'),
          row('resume to a CDP answer', 'resume', 'p50'), row('resume to a CDP answer', 'resume', 'p95')];
}
