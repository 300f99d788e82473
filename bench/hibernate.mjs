// microVM hibernation: a copy of a template with a page that counts, hibernated (POST pause
// {"mode": "hibernate"} until its answer: the machine saved to disk and its QEMU ended) and woken
// (POST resume until a CDP call on the session's cdp_url answers), side by side with the freeze
// (QMP stop and cont, the QEMU kept) and with starting anew (a new copy of the template, to
// CDP-ready, whose page state would be lost). Memory: the session's host RSS (its QEMU's VmRSS)
// running and hibernated, and the size of the file it was saved to, against its guest RAM.
import fs from 'node:fs';
import path from 'node:path';

import { Cdp, qemuPidOf, startCabind, waitFor } from '../tests/integration/helpers.mjs';
import { createReady } from './pool.mjs';
import { summary } from './stats.mjs';

const SPEC = {
  driver: 'microvm', resolution: { width: 1280, height: 800 }, resources: { memory_mb: 2048 },
  start_url: 'data:text/html,<title>counting</title><p id=n>0</p><script>let n=0;' +
    'setInterval(()=>{document.getElementById("n").textContent=++n},100)</script>',
};
const GUEST_KB = 2048 * 1024;
const IDLE_MS = 5000;

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

function rssKb(pid) {
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
}

async function cdpAnswers(cdpUrl) {
  const c = await Cdp.connect(cdpUrl);
  try {
    await c.send('Browser.getVersion');
  } finally {
    await c.close();
  }
}

async function post(server, id, what, body) {
  const t0 = process.hrtime.bigint();
  const r = await server.api('POST', `/v1/sessions/${id}/${what}`, body);
  if (r.status !== 200) throw new Error(`${what}: ${r.status} ${r.text}`);
  return { took: ms(t0), session: r.json };
}

export async function benchHibernate({ rounds = 3, log = () => {} } = {}) {
  const server = await startCabind({
    args: ['--microvm-start-timeout-ms', '300000', '--log-level', 'warn', '--microvm-templates', 'on'],
  });
  const out = { freeze: [], thaw: [], hibernate: [], wake: [], copy: [], rss_kb: [], file_kb: [] };
  try {
    // The template is built by the first create; each round's copy-create is the start-anew figure.
    await createReady(server, SPEC);
    for (let i = 0; i < rounds; i++) {
      const t0 = process.hrtime.bigint();
      const s = await server.createSession(SPEC);
      await cdpAnswers(s.cdp_url);
      out.copy.push(ms(t0));
      try {
        await new Promise((r) => setTimeout(r, IDLE_MS));
        const pid = qemuPidOf(s.id);
        out.rss_kb.push(rssKb(pid));
        out.freeze.push((await post(server, s.id, 'pause')).took);
        const t1 = process.hrtime.bigint();
        await post(server, s.id, 'resume');
        await cdpAnswers(s.cdp_url);
        out.thaw.push(ms(t1));
        const h = await post(server, s.id, 'pause', { mode: 'hibernate' });
        if (h.session.pause_mode !== 'hibernate') throw new Error('not hibernated');
        out.hibernate.push(h.took);
        // The QEMU has ended: the session holds no RAM of the host's.
        await waitFor(() => !fs.existsSync(`/proc/${pid}`), { what: 'the QEMU to be gone' });
        const file = path.join(server.stateDir, 'hibernated', `${s.id}.vmstate`);
        out.file_kb.push(fs.statSync(file).size / 1024);
        const t2 = process.hrtime.bigint();
        await post(server, s.id, 'resume');
        await cdpAnswers(s.cdp_url);
        out.wake.push(ms(t2));
        log(`hibernate: round ${i + 1}/${rounds}: rss ${out.rss_kb.at(-1)} kB, file ` +
            `${out.file_kb.at(-1).toFixed(0)} kB, hibernate ${h.took.toFixed(0)} ms, wake ` +
            `${out.wake.at(-1).toFixed(0)} ms (freeze ${out.freeze.at(-1).toFixed(0)}, thaw ` +
            `${out.thaw.at(-1).toFixed(0)}, new copy ${out.copy.at(-1).toFixed(0)})`);
      } finally {
        await server.deleteSession(s.id);
      }
    }
  } finally {
    await server.stop();
  }
  return Object.fromEntries([...Object.entries(out).map(([k, v]) => [k, summary(v)]),
    ['guest_kb', GUEST_KB]]);
}

export function hibernateRows(r, fmt) {
  return [
    ['microVM hibernate (saved, QEMU ended) vs freeze, POST pause p50 (ms)', fmt(r.hibernate.p50, 0),
      fmt(r.freeze.p50, 0), `${fmt(r.hibernate.p50 / r.freeze.p50, 1)}x`, '', ''],
    ['microVM wake to CDP-ready vs a new template copy, p50 (ms)', fmt(r.wake.p50, 0),
      fmt(r.copy.p50, 0), `${fmt(r.wake.p50 / r.copy.p50, 2)}x`, '', ''],
    ['microVM wake vs thaw of a freeze, to CDP-ready p50 (ms)', fmt(r.wake.p50, 0),
      fmt(r.thaw.p50, 0), `${fmt(r.wake.p50 / r.thaw.p50, 1)}x`, '', ''],
    ['microVM hibernated vs running: host RSS of its QEMU, p50 (MiB)', '0',
      fmt(r.rss_kb.p50 / 1024, 0), '0x', '', ''],
    ['microVM hibernation file vs guest RAM, p50 (MiB)', fmt(r.file_kb.p50 / 1024, 0),
      fmt(r.guest_kb / 1024, 0), `${fmt(r.file_kb.p50 / r.guest_kb, 3)}x`, '', ''],
  ];
}
