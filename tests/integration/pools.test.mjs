// Warm pools (--pool DRIVER:WIDTHxHEIGHT:COUNT): sandboxes started ahead, their browser ready. A
// create whose spec a pool serves claims one and gets its own session: its start page, tokens,
// timers, owner and a profile no one used; the pool refills behind it. A create that finds the
// pool empty starts cold, and one the pool does not serve never touches it. Shutdown leaves no
// pooled sandbox behind.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, test } from 'node:test';

import {
  Cdp, api, leftovers, sessionPids, startCabind, waitFor, waitForNoLeftovers,
} from './helpers.mjs';

const cleanup = [];
after(async () => {
  for (const fn of cleanup.reverse()) await fn();
});

const SIZE = { width: 1024, height: 768 };
const PAGE = 'data:text/html,<title>claimed</title><script>window.started = Date.now()</script>';

async function pool(server) {
  const r = await server.api('GET', '/v1/info');
  assert.equal(r.status, 200, r.text);
  return r.json.pools[0];
}

// The agent processes of a session's sandbox.
function agentPids(id) {
  return sessionPids(id).filter((pid) => {
    try {
      return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0].endsWith('cabin-agent');
    } catch {
      return false;
    }
  });
}

// The pooled sandboxes' ids: their directories in the run dir.
function sandboxDirs(runDir) {
  return fs.readdirSync(runDir).filter((n) => n.startsWith('ses_'));
}

test('creates claim the pool\'s ready sandboxes, an empty pool starts cold, and it refills', async () => {
  const server = await startCabind({ args: ['--pool', `namespace:${SIZE.width}x${SIZE.height}:2`] });
  cleanup.push(() => server.stop());
  await waitFor(async () => (await pool(server)).ready === 2,
                { timeoutMs: 30000, intervalMs: 100, what: 'the pool to fill' });
  assert.deepEqual(await pool(server), {
    driver: 'namespace', resolution: SIZE, size: 2, ready: 2, starting: 0, claims: 0, misses: 0,
  });
  const pooledIds = sandboxDirs(server.runDir);
  assert.equal(pooledIds.length, 2, `the pool's sandboxes: ${pooledIds}`);

  // Three at once: two claims, and one that finds the pool empty (a refill takes far longer
  // than three requests to arrive).
  const spec = { resolution: SIZE, start_url: PAGE, timeout_s: 600 };
  const made = await Promise.all([0, 1, 2].map(() => server.createSession(spec)));
  const p = await pool(server);
  assert.equal(p.claims, 2, JSON.stringify(p));
  assert.equal(p.misses, 1, JSON.stringify(p));
  const claimed = made.filter((s) => pooledIds.includes(s.id));
  assert.equal(claimed.length, 2, 'two sessions are the pooled sandboxes');

  const tokens = new Set(made.map((s) => new URL(s.cdp_url).searchParams.get('token')));
  assert.equal(tokens.size, 3, 'every session has its own CDP token');
  const agents = made.map((s) => agentPids(s.id));
  for (const a of agents) assert.equal(a.length, 1, `one agent per sandbox: ${agents}`);
  assert.equal(new Set(agents.flat()).size, 3, 'three sandboxes, three agents');

  for (const s of made) {
    assert.equal(s.status, 'running');
    assert.equal(s.start_url, PAGE);
    assert.equal(Date.parse(s.expires_at) - Date.parse(s.created_at), 600000, 'its own lifetime');
    const cdp = await Cdp.connect(s.cdp_url);
    try {
      const { targetInfos } = await cdp.send('Target.getTargets');
      const page = targetInfos.find((t) => t.type === 'page');
      assert.equal(page.title, 'claimed', 'the start page has loaded when the create answers');
      // A profile no one used: no cookie, until this session sets one.
      assert.deepEqual((await cdp.send('Storage.getCookies')).cookies, []);
      await cdp.send('Storage.setCookies', {
        cookies: [{ name: 'who', value: s.id, domain: 'pool.test', path: '/' }],
      });
    } finally {
      await cdp.close();
    }
  }
  // A token opens its own session only.
  const [a, b] = made;
  const aToken = new URL(a.cdp_url).searchParams.get('token');
  const refused = await api(server.base, null, 'GET',
                            `/v1/sessions/${b.id}/json/version?token=${encodeURIComponent(aToken)}`);
  assert.equal(refused.status, 401, refused.text);

  // The pool refills behind the claims, with sandboxes no one used.
  await waitFor(async () => (await pool(server)).ready === 2,
                { timeoutMs: 30000, intervalMs: 100, what: 'the pool to refill' });
  const refilled = sandboxDirs(server.runDir).filter((id) => !made.some((s) => s.id === id));
  assert.equal(refilled.length, 2);

  // A size no pool has starts cold and leaves the pool as it is.
  const other = await server.createSession({ resolution: { width: 800, height: 600 } });
  const after = await pool(server);
  assert.deepEqual([after.claims, after.misses, after.ready], [2, 1, 2], JSON.stringify(after));
  for (const s of [...made, other]) {
    await server.deleteSession(s.id);
    await waitForNoLeftovers(s.id, server.runDir);
  }

  // Shutdown destroys the pooled sandboxes.
  const runDir = server.runDir;
  const result = await server.stop({ keep: true });
  assert.equal(result.code, 0);
  for (const id of refilled) assert.deepEqual(leftovers(id, runDir), [], `pooled sandbox ${id}`);
  fs.rmSync(runDir, { recursive: true, force: true });
  fs.rmSync(server.stateDir, { recursive: true, force: true });
});

test('a claimed session is a session like any other: its policy, its owner, its timers', async () => {
  const server = await startCabind({ args: ['--pool', `namespace:${SIZE.width}x${SIZE.height}:1`] });
  cleanup.push(() => server.stop());
  await waitFor(async () => (await pool(server)).ready === 1,
                { timeoutMs: 30000, intervalMs: 100, what: 'the pool to fill' });
  const key = await server.api('POST', '/v1/keys', { name: 'pool-tenant', max_sessions: 2 });
  assert.equal(key.status, 201, key.text);
  const tenant = (method, p, body) => api(server.base, key.json.key, method, p, body);
  const r = await tenant('POST', '/v1/sessions', {
    resolution: SIZE, idle_timeout_s: 0, timeout_s: 120,
    network: { mode: 'allowlist', allow: [{ host: 'pool.test', ports: [443] }] },
  });
  assert.equal(r.status, 201, r.text);
  assert.equal((await pool(server)).claims, 1);
  const s = r.json;
  // Its owner's, not the admin's alone.
  assert.equal((await tenant('GET', `/v1/sessions/${s.id}`)).status, 200);
  const mine = await tenant('GET', '/v1/sessions');
  assert.deepEqual(mine.json.sessions.map((x) => x.id), [s.id]);
  // Its own network policy, set at the claim.
  const net = await tenant('GET', `/v1/sessions/${s.id}/network`);
  assert.equal(net.status, 200, net.text);
  assert.equal(net.json.mode, 'allowlist', net.text);
  assert.equal(net.json.allow[0].host, 'pool.test', net.text);
  // Its commands run, and its lifetime is its own.
  const ran = await tenant('POST', `/v1/sessions/${s.id}/exec`, { argv: ['echo', 'pooled'] });
  assert.equal(ran.json.stdout, 'pooled\n');
  assert.equal(Date.parse(s.expires_at) - Date.parse(s.created_at), 120000);
  assert.equal((await tenant('DELETE', `/v1/sessions/${s.id}`)).status, 200);
  await waitForNoLeftovers(s.id, server.runDir);
});
