// Idempotency-Key on POST /v1/sessions against a real cabind: a retry gets the first create's
// session, another body is refused, a failed create frees its key, and keys outlive a restart.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { removeServerDirs, startCabind } from './helpers.mjs';

const create = (server, key, body) =>
  server.api('POST', '/v1/sessions', body, { headers: { 'Idempotency-Key': key } });

test('a retried create gets the same session; another body with the key is refused', async () => {
  let server = await startCabind();
  try {
    const body = { resolution: { width: 1024, height: 768 } };
    // Two at once: one creates, the other is told it is still running.
    const [a, b] = await Promise.all([create(server, 'order-1', body), create(server, 'order-1', body)]);
    const statuses = [a.status, b.status].sort();
    assert.deepEqual(statuses, [201, 409], `${a.text}\n${b.text}`);
    const made = a.status === 201 ? a.json : b.json;
    assert.equal((a.status === 409 ? a : b).json.error.code, 'idempotency_in_progress');
    const retry = await create(server, 'order-1', body);
    assert.equal(retry.status, 200, retry.text);
    assert.equal(retry.json.id, made.id);
    assert.match(retry.json.cdp_url, /\/cdp\?token=/);
    const listed = await server.api('GET', '/v1/sessions');
    assert.equal(listed.json.sessions.length, 1, 'one session, however often it was asked');
    const other = await create(server, 'order-1', { resolution: { width: 800, height: 600 } });
    assert.equal(other.status, 422, other.text);
    assert.equal(other.json.error.code, 'idempotency_key_reused');
    for (const bad of ['', 'x'.repeat(256), 'has space']) {
      const r = await create(server, bad, body);
      assert.equal(r.status, 400, `${JSON.stringify(bad)}: ${r.text}`);
    }
    // A create that fails frees its key: the retry tries again, and fails again the same way.
    for (let i = 0; i < 2; i++) {
      const failed = await create(server, 'order-2', { driver: 'nope' });
      assert.equal(failed.status, 400, failed.text);
      assert.equal(failed.json.error.code, 'unknown_driver');
    }

    // After a restart on the same state the key still names its session (ended by now).
    await server.stop({ keep: true });
    server = await startCabind({ stateDir: server.stateDir, runDir: server.runDir, key: server.key });
    const late = await create(server, 'order-1', body);
    assert.equal(late.status, 200, late.text);
    assert.equal(late.json.id, made.id);
    assert.equal(late.json.status, 'ended');
    assert.equal((await server.api('GET', '/v1/sessions')).json.sessions.length, 0);
  } finally {
    await server.stop({ keep: true });
    await removeServerDirs(server);
  }
});
