// Restart: what taking sessions over costs when cabind restarts, against what a restart costs
// without adoption (as before, and as a hand-made setup has it): every session made anew. With
// `n` live sessions each holding a page with state, cabind is killed (-9) and started again on the
// same directories; timed from the new cabind's spawn until it listens (the adoption happens
// before), and until a CDP call on every session's old cdp_url answers. Beside it, from the same
// spawn, a cabind with no sessions to adopt (the floor of a start), and the creates that would
// replace the n sessions, one after another. Reported: p50 and p95 over `rounds`, in ms.
import { Cdp, startCabind } from '../tests/integration/helpers.mjs';
import { summary } from './stats.mjs';

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

function onListener(server, url) {
  const u = new URL(url);
  u.host = server.hostPort;
  return u.toString();
}

async function ping(url) {
  const c = await Cdp.connect(url);
  try {
    await c.send('Browser.getVersion');
  } finally {
    await c.close();
  }
}

export async function benchRestart({ n = 4, rounds = 5, log = () => {} } = {}) {
  const listen = [];
  const ready = [];
  const bare = [];
  const recreate = [];
  let server = await startCabind({ args: ['--log-level', 'warn'] });
  try {
    const sessions = [];
    for (let i = 0; i < n; i++) sessions.push(await server.createSession({}));
    for (const s of sessions) await ping(s.cdp_url);
    for (let r = 0; r < rounds; r++) {
      await server.crash();
      const t0 = process.hrtime.bigint();
      server = await startCabind({
        stateDir: server.stateDir, runDir: server.runDir, key: server.key,
        args: ['--log-level', 'warn'],
      });
      listen.push(ms(t0));
      await Promise.all(sessions.map((s) => ping(onListener(server, s.cdp_url))));
      ready.push(ms(t0));

      const b0 = process.hrtime.bigint();
      const empty = await startCabind({ args: ['--log-level', 'warn'] });
      bare.push(ms(b0));
      await empty.stop();

      const c0 = process.hrtime.bigint();
      for (let i = 0; i < n; i++) {
        const s = await server.createSession({});
        await ping(s.cdp_url);
        await server.deleteSession(s.id);
      }
      recreate.push(ms(c0));
      log(`restart: round ${r + 1}/${rounds}`);
    }
    for (const s of sessions) await server.deleteSession(s.id);
  } finally {
    await server.stop();
  }
  return {
    n,
    rounds,
    listening: summary(listen),
    clients_back: summary(ready),
    empty_start: summary(bare),
    recreate: summary(recreate),
  };
}

export function restartRows(r, fmt) {
  const rows = [];
  for (const p of ['p50', 'p95']) {
    rows.push([`restart, ${r.n} sessions adopted, to listening ${p} (ms)`, fmt(r.listening[p], 0),
               fmt(r.empty_start[p], 0), `${fmt(r.listening[p] / r.empty_start[p], 2)}x`, '', '']);
    rows.push([`restart to every old cdp_url answering ${p} (ms)`, fmt(r.clients_back[p], 0),
               fmt(r.recreate[p], 0), `${fmt(r.clients_back[p] / r.recreate[p], 2)}x`, '', '']);
  }
  return rows;
}
