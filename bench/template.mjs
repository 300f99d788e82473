// microVM templates: create to CDP-ready for copies of a template against cold boots of the
// same shape, each on a cabind of its own (--microvm-templates on, then off), and the memory a
// copy holds of its own once idle. Each copy or boot is deleted before the next. The first
// create on the template cabind builds the template (one boot, then the snapshot); it is
// reported apart and not in the copies' figures. Memory: QEMU's Private_Dirty and
// Private_Clean (smaps_rollup) 5 s after the copy was ready, against its guest RAM.
import fs from 'node:fs';

import { qemuPidOf, startCabind } from '../tests/integration/helpers.mjs';
import { createReady } from './pool.mjs';
import { summary } from './stats.mjs';

const SPEC = { driver: 'microvm', resolution: { width: 1280, height: 800 }, resources: { memory_mb: 2048 } };
const GUEST_KB = 2048 * 1024;
const IDLE_MS = 5000;

function privateKb(pid) {
  const rollup = fs.readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  const kb = (name) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(rollup)[1]);
  return kb('Private_Dirty') + kb('Private_Clean');
}

export async function benchTemplate({ copies = 10, cold = 3, log = () => {} } = {}) {
  const timeout = ['--microvm-start-timeout-ms', '300000', '--log-level', 'warn'];
  const out = { copies: [], cold: [], private_kb: [] };
  let server = await startCabind({ args: [...timeout, '--microvm-templates', 'on'] });
  try {
    out.first = await createReady(server, SPEC);
    log(`template: built and first copy in ${out.first.toFixed(0)} ms`);
    for (let i = 0; i < copies; i++) {
      let priv = null;
      const took = await createReady(server, SPEC, async (s) => {
        await new Promise((r) => setTimeout(r, IDLE_MS));
        priv = privateKb(qemuPidOf(s.id));
      });
      out.copies.push(took);
      out.private_kb.push(priv);
      log(`template: copy ${i + 1}/${copies} ${took.toFixed(0)} ms, ${priv} kB private`);
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
    private_kb: summary(out.private_kb),
    guest_kb: GUEST_KB,
  };
}

export function templateRows(r, fmt) {
  return [
    ...['p50', 'p95'].map((p) => [
      `microVM create to CDP-ready, template copy vs cold boot, ${p} (ms)`, fmt(r.copies[p], 0),
      fmt(r.cold[p], 0), `${fmt(r.copies[p] / r.cold[p], 3)}x`, '', '']),
    ['microVM first create of a shape: template boot + snapshot + copy (ms)', fmt(r.first_ms, 0),
      fmt(r.cold.p50, 0), `${fmt(r.first_ms / r.cold.p50, 2)}x`, '', ''],
    ['microVM copy idle 5 s: QEMU private memory p50 (MiB) vs guest RAM',
      fmt(r.private_kb.p50 / 1024, 0), fmt(r.guest_kb / 1024, 0),
      `${fmt(r.private_kb.p50 / r.guest_kb, 3)}x`, '', ''],
  ];
}
