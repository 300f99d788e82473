// cabind's own log as JSON lines (--log-format json): every line one object with its time,
// level, component and message, and the session it is about when there is one.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { removeServerDirs, startCabind, waitFor } from './helpers.mjs';

test('--log-format json: every line is an object, and lines about a session name it', async () => {
  const server = await startCabind({ args: ['--log-format', 'json'] });
  try {
    const s = await server.createSession({});
    const r = await server.api('POST', `/v1/sessions/${s.id}/exec`, { argv: ['sh', '-c', 'echo "bad \\xff byte" >&2'] });
    assert.equal(r.status, 200, r.text);
    assert.equal((await server.api('DELETE', `/v1/sessions/${s.id}`)).status, 200);
    const lines = await waitFor(() => {
      const l = server.logSince(0);
      return l.some((x) => x.includes('"ended') || x.includes('(deleted)')) && l;
    }, { what: 'the session\'s end in the log' });
    // stdout carries the two announcements (where it listens, where the key is), not the log.
    const logged = lines.filter((l) => l.trim() && !/^(cabind \S+ listening on |API key)/.test(l));
    const parsed = logged.map((l) => {
      const o = JSON.parse(l);  // throws on a line that is not JSON
      assert.deepEqual(Object.keys(o).slice(0, 4), ['time', 'level', 'component', 'message'], l);
      assert.match(o.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      return o;
    });
    const about = parsed.filter((o) => o.session === s.id);
    assert.ok(about.some((o) => o.component === 'sessions' && /running/.test(o.message)), JSON.stringify(about));
    assert.ok(about.some((o) => o.component === 'driver.namespace'), 'the sandbox\'s own output, too');
    assert.ok(parsed.some((o) => o.level === 'info' && o.component === 'cabind'));
  } finally {
    await server.stop();
    await removeServerDirs(server);
  }
});
