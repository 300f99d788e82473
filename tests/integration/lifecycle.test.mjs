// The server's own life against real sessions: a SIGTERM with --on-shutdown delete ends them all
// and leaves nothing, and the records say how each session ended. (A crash, and a SIGTERM that
// keeps sessions, are restart.test.mjs's.)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';

import {
  Cdp, api, removeServerDirs, sessionProcess, startCabind, waitFor, waitForNoLeftovers,
  withDeadline,
} from './helpers.mjs';

const cleanup = [];
after(async () => {
  for (const fn of cleanup.reverse()) await fn();
});

// The line cabind prints about its API key, once it has been read.
async function keyLine(server) {
  return waitFor(() => server.logSince(0).find((l) => l.startsWith('API key')),
                 { what: 'the API key line' });
}

test('the API key is printed once, when generated; later starts print only its file', async () => {
  const env = { CABIN_API_KEY: undefined }; // no key from the environment: the state dir's
  const first = await startCabind({ env });
  cleanup.push(() => removeServerDirs(first));
  let second;
  try {
    const file = path.join(first.stateDir, 'api-key');
    const key = fs.readFileSync(file, 'utf8').trim();
    assert.ok(key.length >= 32);
    assert.equal(await keyLine(first), `API key (new): ${key}  (stored in ${file})`);
    assert.equal((await api(first.base, key, 'GET', '/v1/sessions')).status, 200);
    await first.stop({ keep: true });

    second = await startCabind({ env, stateDir: first.stateDir, runDir: first.runDir });
    assert.equal(await keyLine(second), `API key: in ${file}`);
    assert.ok(!second.logSince(0).some((l) => l.includes(key)), second.logTail());
    assert.equal((await api(second.base, key, 'GET', '/v1/sessions')).status, 200);
  } finally {
    await first.stop({ keep: true });
    if (second) await second.stop({ keep: true });
  }
});

// The session's record once it is no longer running.
function endedRecord(server, id, when) {
  return waitFor(
    async () => {
      const r = await server.api('GET', `/v1/sessions/${id}`);
      return r.json?.status !== 'running' ? r.json : null;
    },
    { timeoutMs: 15000, intervalMs: 100, what: `the session to end ${when}` },
  );
}

async function liveSession(server) {
  const s = await server.createSession({});
  const cdp = await Cdp.connect(s.cdp_url);
  assert.ok((await cdp.send('Browser.getVersion')).product);
  return { s, cdp };
}

test('SIGTERM ends every session, closes CDP and leaves nothing; the records say so', async () => {
  const first = await startCabind({ args: ['--on-shutdown', 'delete'] });
  cleanup.push(() => removeServerDirs(first));
  let restarted;
  try {
    const a = await liveSession(first);
    const b = await liveSession(first);
    const result = await first.stop({ keep: true });
    assert.equal(result.killed, undefined, 'cabind exits within 20 s of SIGTERM');
    assert.equal(result.code, 0, `cabind exit status\n${first.logTail(30)}`);
    await withDeadline(Promise.all([a.cdp.closed, b.cdp.closed]), 5000, 'CDP connections to close');
    for (const { s } of [a, b]) await waitForNoLeftovers(s.id, first.runDir);

    restarted = await startCabind({ stateDir: first.stateDir, runDir: first.runDir, key: first.key });
    for (const { s } of [a, b]) {
      const r = await restarted.api('GET', `/v1/sessions/${s.id}`);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.status, 'ended');
      assert.equal(r.json.end_reason, 'server shutdown');
    }
    const live = await restarted.api('GET', '/v1/sessions');
    assert.deepEqual(live.json.sessions, []);
  } finally {
    await first.stop({ keep: true });
    if (restarted) await restarted.stop({ keep: true });
  }
});

test('a session whose browser dies ends on its own and leaves nothing', async () => {
  const server = await startCabind();
  try {
    const { s, cdp } = await liveSession(server);
    // Browser.close from a client ends Chromium; the agent exits and the session ends.
    await cdp.send('Browser.close').catch(() => {});
    await withDeadline(cdp.closed, 10000, 'CDP to close after Browser.close');
    const ended = await endedRecord(server, s.id, 'after its browser exits');
    assert.equal(ended.status, 'failed');
    assert.match(ended.end_reason, /^sandbox exited: Chromium exited with status \d+$/);
    await waitForNoLeftovers(s.id, server.runDir);
    const live = await server.api('GET', '/v1/sessions');
    assert.ok(!live.json.sessions.some((x) => x.id === s.id));
  } finally {
    const result = await server.stop();
    assert.equal(result.code, 0);
  }
});

test('--max-sessions is enforced with 503 capacity, and a slot frees on DELETE', async () => {
  const server = await startCabind({ args: ['--max-sessions', '1'] });
  try {
    const { s, cdp } = await liveSession(server);
    await cdp.close();
    const second = await server.api('POST', '/v1/sessions', {});
    assert.equal(second.status, 503, second.text);
    assert.equal(second.json?.error?.code, 'capacity');
    await server.deleteSession(s.id);
    const third = await liveSession(server);
    await third.cdp.close();
    await server.deleteSession(third.s.id);
    for (const id of [s.id, third.s.id]) await waitForNoLeftovers(id, server.runDir);
  } finally {
    const result = await server.stop();
    assert.equal(result.code, 0);
  }
});

test('a browser killed in the sandbox fails its session, saying what died and how', async () => {
  const server = await startCabind();
  try {
    const s = await server.createSession({});
    // The browser may die of anything; the session must say so, not just end. Killed from the
    // host: exec'd commands run as another uid and cannot signal it.
    process.kill(sessionProcess(s.id, 'chromium'), 'SIGKILL');
    const ended = await endedRecord(server, s.id, 'after its browser is killed');
    assert.equal(ended.status, 'failed');
    assert.equal(ended.end_reason, 'sandbox exited: Chromium killed by signal 9 (Killed)');
    await waitForNoLeftovers(s.id, server.runDir);
  } finally {
    const result = await server.stop();
    assert.equal(result.code, 0);
  }
});
