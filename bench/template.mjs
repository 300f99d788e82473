// microVM templates: create to CDP-ready for copies of a template against cold boots of the
// same shape, each on a cabind of its own (--microvm-templates on, then off), and the memory a
// copy holds of its own once idle. Each copy or boot is deleted before the next. The first
// create on the template cabind builds the template (one boot, then the snapshot); it is
// reported apart and not in the copies' figures. Memory: QEMU's anonymous pages (smaps_rollup)
// 5 s after the copy was ready, against its guest RAM. Then live forks of a running copy with a
// page open: POST fork until its answer (every child ready), for 1 and for 4 children.
import fs from 'node:fs';

import { qemuPidOf, startCabind } from '../tests/integration/helpers.mjs';
import { createReady } from './pool.mjs';
import { summary } from './stats.mjs';

const SPEC = { driver: 'microvm', resolution: { width: 1280, height: 800 }, resources: { memory_mb: 2048 } };
const GUEST_KB = 2048 * 1024;
const IDLE_MS = 5000;

// The memory only this QEMU holds: its anonymous pages, which are its own heap and translation
// cache and the guest pages it has written (copied out of the template's RAM). Private_* would
// count the template's pages too whenever this copy is the only one mapping them.
function ownKb(pid) {
  const rollup = fs.readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  return Number(/^Anonymous:\s+(\d+) kB/m.exec(rollup)[1]);
}

// POST fork of `source` into `count`, until the answer: ms. The children are deleted after.
async function forkReady(server, source, count) {
  const t0 = process.hrtime.bigint();
  const r = await server.api('POST', `/v1/sessions/${source.id}/fork`, { count });
  const took = Number(process.hrtime.bigint() - t0) / 1e6;
  if (r.status !== 201) throw new Error(`fork: ${r.status} ${r.text}`);
  for (const c of r.json.sessions) await server.deleteSession(c.id);
  return took;
}

export async function benchTemplate({ copies = 10, cold = 3, forks = 3, log = () => {} } = {}) {
  const timeout = ['--microvm-start-timeout-ms', '300000', '--log-level', 'warn',
    '--microvm-max-sessions', '8'];
  const out = { copies: [], cold: [], own_kb: [], fork1: [], fork4: [] };
  let server = await startCabind({ args: [...timeout, '--microvm-templates', 'on'] });
  try {
    out.first = await createReady(server, SPEC);
    log(`template: built and first copy in ${out.first.toFixed(0)} ms`);
    for (let i = 0; i < copies; i++) {
      let priv = null;
      const took = await createReady(server, SPEC, async (s) => {
        await new Promise((r) => setTimeout(r, IDLE_MS));
        priv = ownKb(qemuPidOf(s.id));
      });
      out.copies.push(took);
      out.own_kb.push(priv);
      log(`template: copy ${i + 1}/${copies} ${took.toFixed(0)} ms, ${priv} kB its own`);
    }
    const source = await server.createSession({ ...SPEC, start_url: 'data:text/html,<title>source</title><input value="half a fo">' });
    try {
      for (let i = 0; i < forks; i++) {
        out.fork1.push(await forkReady(server, source, 1));
        log(`template: fork of 1 ${out.fork1.at(-1).toFixed(0)} ms`);
      }
      for (let i = 0; i < Math.max(1, forks - 1); i++) {
        out.fork4.push(await forkReady(server, source, 4));
        log(`template: fork of 4 ${out.fork4.at(-1).toFixed(0)} ms`);
      }
    } finally {
      await server.deleteSession(source.id);
    }
  } finally {
    await server.stop();
  }
  server = await startCabind({ args: [...timeout, '--microvm-templates', 'off'] });
  try {
    for (let i = 0; i < cold; i++) {
      out.cold.push(await createReady(server, SPEC));
      log(`template: cold boot ${i + 1}/${cold} ${out.cold.at(-1).toFixed(0)} ms`);
    }
  } finally {
    await server.stop();
  }
  return {
    first_ms: out.first,
    copies: summary(out.copies),
    cold: summary(out.cold),
    own_kb: summary(out.own_kb),
    guest_kb: GUEST_KB,
    fork1: summary(out.fork1),
    fork4: summary(out.fork4),
  };
}

export function templateRows(r, fmt) {
  return [
    ...['p50', 'p95'].map((p) => [
      `microVM create to CDP-ready, template copy vs cold boot, ${p} (ms)`, fmt(r.copies[p], 0),
      fmt(r.cold[p], 0), `${fmt(r.copies[p] / r.cold[p], 3)}x`, '', '']),
    ['microVM first create of a shape: template boot + snapshot + copy (ms)', fmt(r.first_ms, 0),
      fmt(r.cold.p50, 0), `${fmt(r.first_ms / r.cold.p50, 2)}x`, '', ''],
    ['microVM copy idle 5 s: memory only its QEMU holds, p50 (MiB) vs guest RAM',
      fmt(r.own_kb.p50 / 1024, 0), fmt(r.guest_kb / 1024, 0),
      `${fmt(r.own_kb.p50 / r.guest_kb, 3)}x`, '', ''],
    ...[['1', r.fork1], ['4', r.fork4]].map(([n, f]) => [
      `microVM live fork of a running session into ${n}, until all are ready, p50 (ms) vs cold boot`,
      fmt(f.p50, 0), fmt(r.cold.p50, 0), `${fmt(f.p50 / r.cold.p50, 3)}x`, '', '']),
  ];
}
