// Pool: create to CDP-ready from a warm pool against a cold start, on its own cabind with
// --pool namespace:1280x800:1. Each round: a create the pool serves (timed from the POST until a
// Browser.getVersion on its cdp_url answers), then, once the pool has refilled, a cold create of
// a size no pool has (800x600), timed the same way; both sessions are deleted before the next
// round. Reported: p50 and p95 over `rounds`, in ms.
import { Cdp, startCabind, waitFor } from '../tests/integration/helpers.mjs';
import { summary } from './stats.mjs';

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

// Create to CDP-ready in ms; `whileLive(session)` runs after the timing, before the delete.
export async function createReady(server, spec, whileLive = async () => {}) {
  const t0 = process.hrtime.bigint();
  const s = await server.createSession(spec);
  const c = await Cdp.connect(s.cdp_url);
  try {
    await c.send('Browser.getVersion');
  } finally {
    await c.close();
  }
  const took = ms(t0);
  try {
    await whileLive(s);
  } finally {
    await server.deleteSession(s.id);
  }
  return took;
}

export async function benchPool({ rounds = 20, log = () => {} } = {}) {
  const server = await startCabind({ args: ['--log-level', 'warn', '--pool', 'namespace:1280x800:1'] });
  const claimed = [];
  const cold = [];
  const refilled = async () => {
    const r = await server.api('GET', '/v1/info');
    return r.json.pools[0].ready === 1;
  };
  try {
    for (let r = 0; r < rounds; r++) {
      await waitFor(refilled, { timeoutMs: 60000, intervalMs: 20, what: 'the pool to refill' });
      claimed.push(await createReady(server, { resolution: { width: 1280, height: 800 } }));
      await waitFor(refilled, { timeoutMs: 60000, intervalMs: 20, what: 'the pool to refill' });
      cold.push(await createReady(server, { resolution: { width: 800, height: 600 } }));
      log(`pool: round ${r + 1}/${rounds}`);
    }
    const info = (await server.api('GET', '/v1/info')).json.pools[0];
    if (info.claims !== rounds) throw new Error(`the pool served ${info.claims} of ${rounds} creates`);
  } finally {
    await server.stop();
  }
  return { rounds, claimed: summary(claimed), cold: summary(cold) };
}

export function poolRows(r, fmt) {
  return ['p50', 'p95'].map((p) => [
    `create to CDP-ready, warm pool claim vs cold start, ${p} (ms)`, fmt(r.claimed[p], 1),
    fmt(r.cold[p], 1), `${fmt(r.claimed[p] / r.cold[p], 3)}x`, '', '']);
}
