// Tenants against a real cabind: the admin key mints scoped keys; a tenant sees and touches only
// its own sessions, is held to its quota and create rate (429 with Retry-After), and is refused
// once revoked; past the server's cap creates wait in a bounded queue (503 with Retry-After
// when it is full or their time runs out).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { api, removeServerDirs, startCabind, waitFor, wsOpen } from './helpers.mjs';

function auditEntries(server) {
  return fs.readFileSync(path.join(server.stateDir, 'audit.log'), 'utf8')
    .split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

function sample(text, series) {
  for (const line of text.split('\n')) {
    if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  }
  return 0;
}

async function metric(server, series) {
  const r = await server.api('GET', '/metrics');
  assert.equal(r.status, 200, r.text);
  return sample(r.text, series);
}

function assertRetryAfter(r, max) {
  const v = r.headers.get('retry-after');
  assert.match(v ?? '', /^\d+$/, `Retry-After: ${v}`);
  assert.ok(Number(v) >= 1 && Number(v) <= max, `Retry-After ${v} within 1..${max}`);
}

test('tenant keys: isolation, quotas, rate, revocation and the audit log', async () => {
  const server = await startCabind();
  const made = [];
  try {
    const as = (key) => (method, p, body, opts = {}) => server.api(method, p, body, { ...opts, key });
    const admin = as(server.key);

    const mint = async (body) => {
      const r = await admin('POST', '/v1/keys', body);
      assert.equal(r.status, 201, r.text);
      assert.match(r.json.id, /^key_[a-z0-9]{20}$/);
      assert.match(r.json.key, /^cabin_key_[a-z0-9]{20}\.[0-9a-f]{64}$/);
      assert.ok(r.json.key.includes(r.json.id));
      assert.equal(r.json.name, body.name);
      assert.match(r.json.created_at, /^\d{4}-\d\d-\d\dT/);
      return r.json;
    };
    const alpha = await mint({ name: 'alpha', max_sessions: 1, max_creates_per_minute: 100 });
    const beta = await mint({ name: 'beta', max_sessions: 5, max_creates_per_minute: 1 });
    assert.equal(alpha.max_sessions, 1);
    assert.equal(beta.max_creates_per_minute, 1);
    const A = as(alpha.key);
    const B = as(beta.key);

    // A bad body is refused, and mints nothing.
    for (const bad of [{}, { name: 'x', max_sessions: 0 }, { name: 'x', extra: 1 }, { name: 'a\nb' }]) {
      const r = await admin('POST', '/v1/keys', bad);
      assert.equal(r.status, 400, `${JSON.stringify(bad)}: ${r.text}`);
    }

    // The list shows both keys and never a secret.
    const listed = await admin('GET', '/v1/keys');
    assert.equal(listed.status, 200, listed.text);
    assert.deepEqual(listed.json.keys.map((k) => k.name), ['alpha', 'beta']);
    for (const k of listed.json.keys) assert.equal(k.key, undefined);
    assert.ok(!listed.text.includes(alpha.key.split('.')[1]));

    // A tenant key cannot mint, list or revoke keys, nor read the server's metrics.
    for (const [method, p, body] of [['POST', '/v1/keys', { name: 'mine' }], ['GET', '/v1/keys'],
      ['DELETE', `/v1/keys/${beta.id}`], ['GET', '/metrics']]) {
      const r = await A(method, p, body);
      assert.equal(r.status, 403, `${method} ${p}: ${r.text}`);
      assert.equal(r.json.error.code, 'admin_only');
    }
    assert.equal((await admin('GET', '/v1/keys')).json.keys.length, 2);

    // Each creates a session; the create records who owns it.
    const a = await A('POST', '/v1/sessions', {}, { headers: { 'Idempotency-Key': 'same' } });
    assert.equal(a.status, 201, a.text);
    made.push(a.json.id);
    assert.equal(a.json.owner, alpha.id);
    const b = await B('POST', '/v1/sessions', {});
    assert.equal(b.status, 201, b.text);
    made.push(b.json.id);
    assert.equal(b.json.owner, beta.id);

    // Idempotency-Keys are per tenant: A's retry gets A's session, the admin's same key another.
    const retry = await A('POST', '/v1/sessions', {}, { headers: { 'Idempotency-Key': 'same' } });
    assert.equal(retry.status, 200, retry.text);
    assert.equal(retry.json.id, a.json.id);
    const adminSame = await admin('POST', '/v1/sessions', {}, { headers: { 'Idempotency-Key': 'same' } });
    assert.equal(adminSame.status, 201, adminSame.text);
    made.push(adminSame.json.id);
    assert.notEqual(adminSame.json.id, a.json.id);
    assert.equal(adminSame.json.owner, 'admin');

    // Lists: each tenant its own; the admin everything.
    const ids = async (who) => {
      const r = await who('GET', '/v1/sessions');
      assert.equal(r.status, 200, r.text);
      return r.json.sessions.map((s) => s.id).sort();
    };
    assert.deepEqual(await ids(A), [a.json.id]);
    assert.deepEqual(await ids(B), [b.json.id]);
    assert.deepEqual(await ids(admin), [a.json.id, b.json.id, adminSame.json.id].sort());
    const allB = await B('GET', '/v1/sessions?all=1');
    assert.deepEqual(allB.json.sessions.map((s) => s.id), [b.json.id]);

    // B reaches none of A's session, on any route: each answers as for a session that does not
    // exist. A itself is let in (the control that the routes are right).
    const id = a.json.id;
    const unknown = 'ses_' + '0'.repeat(20);
    const routes = [
      ['GET', ''], ['PATCH', '', { timeout_s: 600 }], ['POST', '/keepalive'], ['POST', '/pause'],
      ['POST', '/resume'], ['POST', '/exec', { argv: ['true'] }],
      ['POST', '/computer', { action: 'cursor_position' }], ['GET', '/screenshot'], ['GET', '/logs'],
      ['GET', '/network'], ['PUT', '/network', { mode: 'none' }], ['GET', '/network/log'],
      ['POST', '/tokens', { scope: 'cdp' }], ['POST', '/tokens/revoke'],
      ['POST', '/previews', { port: 8000 }], ['GET', '/previews'],
      ['DELETE', `/previews/prv_${'a'.repeat(20)}`], ['GET', '/json/version'], ['GET', '/json/list'],
      ['GET', '/frames.mjpeg'], ['GET', '/live/status'], ['DELETE', ''],
    ];
    for (const [method, sub, body] of routes) {
      const r = await B(method, `/v1/sessions/${id}${sub}`, body);
      assert.equal(r.status, 404, `${method} ${sub}: ${r.status} ${r.text}`);
      assert.equal(r.json.error.code, 'session_not_found', `${method} ${sub}`);
      const none = await B(method, `/v1/sessions/${unknown}${sub}`, body);
      assert.equal(none.text, r.text, `${method} ${sub}: the same answer as for no session`);
    }
    const live = await B('GET', `/v1/sessions/${id}/live`);
    assert.equal(live.status, 404);
    for (const sub of ['/cdp', '/vnc', '/frames']) {
      const url = `${server.base.replace('http', 'ws')}/v1/sessions/${id}${sub}`;
      await assert.rejects(wsOpen(url, { headers: { authorization: `Bearer ${beta.key}` } }),
        (err) => err.status === 404 && err.json?.error?.code === 'session_not_found', sub);
    }
    const mine = await A('GET', `/v1/sessions/${id}/json/version`);
    assert.equal(mine.status, 200, mine.text);
    const ownWs = await wsOpen(mine.json.webSocketDebuggerUrl);
    ownWs.close();
    assert.equal((await A('GET', `/v1/sessions/${id}`)).json.status, 'running',
                 'B\'s DELETE and pause left it as it was');
    // Capability tokens work as before, whoever holds them.
    const byToken = await api(server.base, null, 'GET',
      `/v1/sessions/${id}/json/version?token=${new URL(a.json.cdp_url).searchParams.get('token')}`);
    assert.equal(byToken.status, 200, byToken.text);

    // A is at its max_sessions: 429 quota_sessions with a Retry-After, and no session made.
    const over = await A('POST', '/v1/sessions', {});
    assert.equal(over.status, 429, over.text);
    assert.equal(over.json.error.code, 'quota_sessions');
    assert.match(over.json.error.message, /max_sessions/);
    assertRetryAfter(over, 3600);
    assert.deepEqual(await ids(A), [a.json.id]);

    // B may create once a minute: its second create, after deleting the first, is 429.
    assert.equal((await B('DELETE', `/v1/sessions/${b.json.id}`)).status, 200);
    const fast = await B('POST', '/v1/sessions', {});
    assert.equal(fast.status, 429, fast.text);
    assert.equal(fast.json.error.code, 'rate_creates');
    assertRetryAfter(fast, 60);
    assert.ok(Number(fast.headers.get('retry-after')) > 30, 'a token comes once a minute');

    // /v1/info shows a tenant its own numbers.
    const info = await A('GET', '/v1/info');
    assert.deepEqual(info.json.sessions, { live: 1, max: 1, max_creates_per_minute: 100 });

    // Revoked: A's key is refused at once; its session runs on until it ends.
    const revoked = await admin('DELETE', `/v1/keys/${alpha.id}`);
    assert.equal(revoked.status, 200, revoked.text);
    assert.match(revoked.json.revoked_at, /^\d{4}-/);
    for (const p of ['/v1/sessions', `/v1/sessions/${id}`]) {
      const r = await A('GET', p);
      assert.equal(r.status, 401, r.text);
      assert.equal(r.json.error.code, 'unauthenticated');
    }
    assert.equal((await admin('GET', `/v1/sessions/${id}`)).json.status, 'running');
    assert.deepEqual((await admin('GET', '/v1/keys')).json.keys.map((k) => k.id), [beta.id]);
    // A working key's id with a secret one digit off is refused.
    const forged = as(beta.key.slice(0, -1) + (beta.key.endsWith('0') ? '1' : '0'));
    assert.equal((await forged('GET', '/v1/sessions')).status, 401);
    assert.equal((await B('GET', '/v1/sessions')).status, 200);
    assert.equal((await admin('DELETE', `/v1/keys/key_${'z'.repeat(20)}`)).status, 404);

    // The metrics count refusals by reason and name no key or session.
    const m = await admin('GET', '/metrics');
    assert.equal(sample(m.text, 'cabin_create_refusals_total{reason="quota_sessions"}'), 1);
    assert.equal(sample(m.text, 'cabin_create_refusals_total{reason="rate_creates"}'), 1);
    assert.equal(sample(m.text, 'cabin_api_keys'), 1);
    assert.doesNotMatch(m.text, /key_[a-z0-9]{20}|ses_[a-z0-9]{20}/);

    // The audit log: who minted and revoked which key, and each tenant's own acts.
    const entries = auditEntries(server);
    const mints = entries.filter((e) => e.action === 'key.mint' && e.status === 201);
    assert.deepEqual(mints.map((e) => [e.key, e.api_key, e.name]),
                     [['admin', alpha.id, 'alpha'], ['admin', beta.id, 'beta']]);
    const revokes = entries.filter((e) => e.action === 'key.revoke');
    assert.deepEqual(revokes.map((e) => [e.key, e.api_key, e.status]),
                     [['admin', alpha.id, 200], ['admin', `key_${'z'.repeat(20)}`, 404]]);
    const creates = entries.filter((e) => e.action === 'session.create' && e.status === 201);
    assert.deepEqual(creates.map((e) => [e.key, e.session]),
                     [[alpha.id, a.json.id], [beta.id, b.json.id], ['admin', adminSame.json.id]]);
    const quota = entries.find((e) => e.action === 'session.create' && e.outcome === 'quota_sessions');
    assert.equal(quota?.key, alpha.id);
    const text = fs.readFileSync(path.join(server.stateDir, 'audit.log'), 'utf8');
    for (const k of [alpha, beta]) assert.ok(!text.includes(k.key.split('.')[1]), 'no secret');
  } finally {
    for (const id of made) await server.api('DELETE', `/v1/sessions/${id}`).catch(() => {});
    await server.stop({ keep: true });
    await removeServerDirs(server);
  }
});

test('past the cap creates wait in order for room, and are refused when the queue is full, ' +
     'their client leaves or their time runs out', async () => {
  const server = await startCabind({
    args: ['--max-sessions', '1', '--create-queue', '2', '--create-queue-timeout-s', '20'],
  });
  const made = [];
  const waiting = () => metric(server, 'cabin_create_queue_waiting');
  try {
    const first = await server.createSession({});
    made.push(first.id);
    const second = server.api('POST', '/v1/sessions', {});
    await waitFor(async () => (await waiting()) === 1, { what: 'the second create to queue' });
    const thirdAt = Date.now();
    const third = server.api('POST', '/v1/sessions', {});
    await waitFor(async () => (await waiting()) === 2, { what: 'the third create to queue' });

    // The queue is full: refused at once, with a Retry-After.
    const fourth = await server.api('POST', '/v1/sessions', {});
    assert.equal(fourth.status, 503, fourth.text);
    assert.equal(fourth.json.error.code, 'capacity');
    assertRetryAfter(fourth, 3600);

    // The first ends: the second (first in line) gets its room; the third waits on.
    await server.deleteSession(first.id);
    const got = await second;
    assert.equal(got.status, 201, got.text);
    made.push(got.json.id);
    assert.equal(got.json.status, 'running');
    assert.equal(await waiting(), 1);

    // A queued create whose client leaves leaves the queue.
    const abort = new AbortController();
    const gone = fetch(`${server.base}/v1/sessions`, {
      method: 'POST', body: '{}', signal: abort.signal,
      headers: { authorization: `Bearer ${server.key}`, 'content-type': 'application/json' },
    }).catch((err) => err);
    await waitFor(async () => (await waiting()) === 2, { what: 'the aborted create to queue' });
    abort.abort();
    assert.equal((await gone).name, 'AbortError');
    await waitFor(async () => (await waiting()) === 1, { what: 'the aborted create to leave' });
    assert.equal(await metric(server, 'cabin_create_refusals_total{reason="client_gone"}'), 1);

    // The third's time runs out: 503 capacity with a Retry-After, after about 20 s.
    const late = await third;
    const waited = Date.now() - thirdAt;
    assert.equal(late.status, 503, late.text);
    assert.equal(late.json.error.code, 'capacity');
    assert.match(late.json.error.message, /--create-queue-timeout-s/);
    assertRetryAfter(late, 3600);
    assert.ok(waited >= 19000 && waited < 30000, `waited ${waited} ms`);
    assert.equal(await waiting(), 0);
    const m = (await server.api('GET', '/metrics')).text;
    assert.equal(sample(m, 'cabin_create_refusals_total{reason="queue_full"}'), 1);
    assert.equal(sample(m, 'cabin_create_refusals_total{reason="queue_timeout"}'), 1);
    assert.equal(sample(m, 'cabin_create_queue_wait_seconds_count{outcome="admitted"}'), 1);
    assert.equal((await server.api('GET', '/v1/sessions')).json.sessions.length, 1);
  } finally {
    for (const id of made) await server.api('DELETE', `/v1/sessions/${id}`).catch(() => {});
    await server.stop({ keep: true });
    await removeServerDirs(server);
  }
});

test('resources: a server cap per sandbox (400) and tenant budgets (429)', async () => {
  const server = await startCabind({
    args: ['--max-sandbox-memory-mb', '1024', '--max-sandbox-vcpus', '2',
      '--sandbox-memory-mb', '512'],
  });
  try {
    const over = await server.api('POST', '/v1/sessions', { resources: { memory_mb: 2048 } });
    assert.equal(over.status, 400, over.text);
    assert.equal(over.json.error.code, 'invalid_request');
    assert.match(over.json.error.message, /resources\.memory_mb.*--max-sandbox-memory-mb/);
    const cpus = await server.api('POST', '/v1/sessions', { resources: { vcpus: 3 } });
    assert.equal(cpus.status, 400, cpus.text);
    assert.match(cpus.json.error.message, /resources\.vcpus.*--max-sandbox-vcpus/);

    const minted = await server.api('POST', '/v1/keys',
      { name: 'small', max_memory_mb: 512, max_vcpus: 1 });
    assert.equal(minted.status, 201, minted.text);
    assert.equal(minted.json.max_memory_mb, 512);
    assert.equal(minted.json.max_vcpus, 1);
    const asTenant = (body) => server.api('POST', '/v1/sessions', body, { key: minted.json.key });
    const big = await asTenant({ resources: { memory_mb: 1024 } });
    assert.equal(big.status, 429, big.text);
    assert.equal(big.json.error.code, 'quota_memory');
    assert.match(big.json.error.message, /max_memory_mb/);
    assertRetryAfter(big, 3600);
    const many = await asTenant({ resources: { vcpus: 2 } });
    assert.equal(many.status, 429, many.text);
    assert.equal(many.json.error.code, 'quota_vcpus');
    assert.match(many.json.error.message, /max_vcpus/);
  } finally {
    await server.stop();
  }
});

test('--sessions-memory-percent: a create that would overcommit the node is 503', async () => {
  const totalMb = Number(fs.readFileSync('/proc/meminfo', 'utf8').match(/MemTotal:\s+(\d+)/)[1]) >> 10;
  const server = await startCabind({ args: ['--sessions-memory-percent', '1'] });
  try {
    // More than 1 % of the host's memory, in one session.
    const r = await server.api('POST', '/v1/sessions',
      { resources: { memory_mb: Math.ceil(totalMb / 100) + 512 } });
    assert.equal(r.status, 503, r.text);
    assert.equal(r.json.error.code, 'capacity_memory');
    assert.match(r.json.error.message, /--sessions-memory-percent/);
    assertRetryAfter(r, 3600);
  } finally {
    await server.stop();
  }
});
