// Scale-out: `sessions` sessions (10,000) on three cabind nodes behind cabin-gateway, against the
// same number on one cabind, all on the sim driver (no sandbox, no browser: the server's own
// costs). Measured in one run: the create rate (32 creates in flight), the list of every session,
// one session's REST read and a CDP round trip (through the gateway against the node directly,
// p50 and p99), and memory: cabind's resident size per session, and the gateway's before and
// after it routed for all of them.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';

import { Cdp, freePort, startCabind } from '../tests/integration/helpers.mjs';
import { startGateway } from '../tests/integration/scale_helpers.mjs';
import { summary } from './stats.mjs';

const NODES = ['127.0.0.2', '127.0.0.3', '127.0.0.4'];
const GATEWAY = '127.0.0.5';
const CONCURRENCY = 32;

const us = (t0) => Number(process.hrtime.bigint() - t0) / 1e3;

function rssKib(pid) {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]);
}

function nodeArgs(max) {
  return ['--log-level', 'warn', '--sim-driver', '--default-driver', 'sim', '--max-sessions',
          String(max), '--default-idle-timeout-s', '0', '--max-connections', '4096',
          '--max-connections-per-peer', '4096'];
}

// `count` creates, CONCURRENCY at a time: {ids, seconds}.
async function createMany(target, count, log) {
  const ids = [];
  let next = 0;
  const t0 = process.hrtime.bigint();
  const worker = async () => {
    while (next < count) {
      next += 1;
      const r = await target.api('POST', '/v1/sessions', {}, { unchecked: true });
      if (r.status !== 201) throw new Error(`create ${ids.length}: ${r.status} ${r.text}`);
      ids.push(r.json.id);
      if (ids.length % 2000 === 0) log(`scale: ${ids.length} sessions`);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return { ids, seconds: us(t0) / 1e6 };
}

async function listTimes(target, expect, rounds) {
  const out = [];
  for (let i = 0; i < rounds; i++) {
    const t0 = process.hrtime.bigint();
    const r = await target.api('GET', '/v1/sessions', undefined, { unchecked: true });
    out.push(us(t0) / 1e3);
    if (r.status !== 200 || r.json.sessions.length !== expect) {
      const down = r.headers?.get('cabin-unavailable-nodes');
      throw new Error(`list: ${r.status}, ${r.json?.sessions?.length} sessions of ${expect}` +
                      (down ? ` (unavailable: ${down})` : ''));
    }
  }
  return summary(out);
}

// Reads of one session, sequential; the same count at each target, interleaved in rounds.
async function restTimes(targets, id, n) {
  const times = targets.map(() => []);
  for (let round = 0; round < 10; round++) {
    for (const [i, t] of targets.entries()) {
      for (let k = 0; k < n / 10; k++) {
        const t0 = process.hrtime.bigint();
        const r = await t.api('GET', `/v1/sessions/${id}`, undefined, { unchecked: true });
        times[i].push(us(t0));
        if (r.status !== 200) throw new Error(`GET ${id}: ${r.status}`);
      }
    }
  }
  return times.map(summary);
}

// CDP round trips (Browser.getVersion) on one connection per URL, interleaved in rounds.
async function cdpTimes(urls, n) {
  const conns = [];
  for (const u of urls) conns.push(await Cdp.connect(u));
  const times = urls.map(() => []);
  try {
    for (const c of conns) for (let k = 0; k < 200; k++) await c.send('Browser.getVersion');
    for (let round = 0; round < 10; round++) {
      for (const [i, c] of conns.entries()) {
        for (let k = 0; k < n / 10; k++) {
          const t0 = process.hrtime.bigint();
          await c.send('Browser.getVersion');
          times[i].push(us(t0));
        }
      }
    }
  } finally {
    for (const c of conns) await c.close();
  }
  return times.map(summary);
}

export async function benchScaleOut({ sessions = 10000, rounds = 2000, log = () => {} } = {}) {
  const result = { sessions, rounds };
  // One node holding them all.
  {
    const node = await startCabind({ args: nodeArgs(sessions) });
    try {
      const rss0 = rssKib(node.pid);
      const made = await createMany(node, sessions, log);
      result.single = {
        creates_per_s: sessions / made.seconds,
        rss_per_session_kib: (rssKib(node.pid) - rss0) / sessions,
        list_ms: await listTimes(node, sessions, 5),
      };
      log('scale: one node done');
    } finally {
      await node.stop();
    }
  }
  // Three nodes behind a gateway.
  const port = await freePort();
  const key = randomBytes(16).toString('hex');
  const nodes = [];
  let gateway;
  try {
    for (const [i, ip] of NODES.entries()) {
      nodes.push(await startCabind({
        key, listen: `${ip}:${port}`,
        args: [...nodeArgs(sessions), '--node-id', `n${i}`,
               '--public-url', `http://${GATEWAY}:${port}`],
      }));
    }
    gateway = await startGateway(GATEWAY, port, {
      nodes: NODES.map((ip) => `${ip}:${port}`), key, args: ['--log-level', 'warn'],
    });
    for (let i = 0; i < 100; i++) {
      const r = await fetch(`${gateway.base}/readyz`);
      if (r.status === 200 && (await r.json()).nodes_up === NODES.length) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    const gwRss0 = rssKib(gateway.pid);
    const nodeRss0 = nodes.map((n) => rssKib(n.pid));
    const made = await createMany(gateway, sessions, log);
    const gwRssCreated = rssKib(gateway.pid);
    const perNode = nodes.map((n, i) => (rssKib(n.pid) - nodeRss0[i]));
    const list = await listTimes(gateway, sessions, 5);
    // One session, read through the gateway and at its node.
    const id = made.ids[made.ids.length >> 1];
    const owner = nodes[Number(/^ses_n(\d+)_/.exec(id)[1])];
    const [restGw, restNode] = await restTimes([gateway, owner], id, rounds);
    const s = (await gateway.api('GET', `/v1/sessions/${id}`, undefined, { unchecked: true })).json;
    const direct = s.cdp_url.replace(`${GATEWAY}:${port}`, owner.hostPort);
    const [cdpGw, cdpNode] = await cdpTimes([s.cdp_url, direct], rounds);
    const counts = await Promise.all(nodes.map(async (n) =>
      (await n.api('GET', '/v1/info', undefined, { unchecked: true })).json.sessions.live));
    result.gateway = {
      creates_per_s: sessions / made.seconds,
      per_node: counts,
      rss_per_session_kib: perNode.reduce((a, b) => a + b, 0) / sessions,
      list_ms: list,
      gateway_rss_kib_before: gwRss0,
      gateway_rss_kib_created: gwRssCreated,
      gateway_rss_kib_after: rssKib(gateway.pid),
      rest_us: { gateway: restGw, node: restNode },
      cdp_us: { gateway: cdpGw, node: cdpNode },
    };
    log('scale: three nodes done');
  } finally {
    await gateway?.stop();
    for (const n of nodes) await n.stop();
  }
  return result;
}

export function scaleRows(r, fmt) {
  const g = r.gateway;
  const signed = (v) => `${v >= 0 ? '+' : ''}${fmt(v, 0)}`;
  const rows = [
    [`${r.sessions} sim sessions: creates/s (3 nodes + gateway vs 1 node)`, fmt(g.creates_per_s, 0),
     fmt(r.single.creates_per_s, 0), `${fmt(g.creates_per_s / r.single.creates_per_s, 2)}x`, '', ''],
    [`list of ${r.sessions} p50 (ms)`, fmt(g.list_ms.p50, 0), fmt(r.single.list_ms.p50, 0),
     `${fmt(g.list_ms.p50 / r.single.list_ms.p50, 2)}x`, '≤ 1000', g.list_ms.p50 <= 1000 ? 'met' : 'MISSED'],
    ['cabind resident memory per session (KiB)', fmt(g.rss_per_session_kib, 1),
     fmt(r.single.rss_per_session_kib, 1), '', '', ''],
    [`gateway resident memory, none → ${r.sessions} created (KiB)`, fmt(g.gateway_rss_kib_created, 0),
     fmt(g.gateway_rss_kib_before, 0), `${fmt(g.gateway_rss_kib_created - g.gateway_rss_kib_before, 0)} KiB`,
     '', ''],
    [`gateway resident memory, none → after lists and reads (KiB)`, fmt(g.gateway_rss_kib_after, 0),
     fmt(g.gateway_rss_kib_before, 0), `${fmt(g.gateway_rss_kib_after - g.gateway_rss_kib_before, 0)} KiB`,
     '', ''],
  ];
  for (const p of ['p50', 'p99']) {
    rows.push([`GET one session ${p}, gateway vs node (µs)`, fmt(g.rest_us.gateway[p], 0),
               fmt(g.rest_us.node[p], 0), `${signed(g.rest_us.gateway[p] - g.rest_us.node[p])} µs`,
               '', '']);
    const added = g.cdp_us.gateway[p] - g.cdp_us.node[p];
    rows.push([`CDP round trip ${p}, gateway vs node (µs)`, fmt(g.cdp_us.gateway[p], 0),
               fmt(g.cdp_us.node[p], 0), `${signed(added)} µs`, p === 'p50' ? '≤ +100' : '',
               p === 'p50' ? (added <= 100 ? 'met' : 'MISSED') : '']);
  }
  return rows;
}

