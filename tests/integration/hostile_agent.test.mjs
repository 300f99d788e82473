// A compromised agent inside a real sandbox cannot exhaust cabind: a nesting bomb, a body larger
// than the endpoint can honestly carry, an endless image and a frame header that lies each get a
// clean 502 agent_error (or a closed stream), while cabind keeps answering everyone else at once.
// Nor can its recordings fill the host's disk or hold its session's end.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { BIN_DIR, removeTree, useCabind, withDeadline, wsOpen } from './helpers.mjs';

const FAKE_AGENT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures',
                             'hostile-agent.py');
// A bin dir whose cabin-agent is the hostile one; the launcher is the real cabin-sandbox.
const binDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-hostile-bin-'));
fs.symlinkSync(path.join(BIN_DIR, 'cabin-sandbox'), path.join(binDir, 'cabin-sandbox'));
fs.copyFileSync(FAKE_AGENT, path.join(binDir, 'cabin-agent'));
fs.chmodSync(path.join(binDir, 'cabin-agent'), 0o755);
fs.chmodSync(binDir, 0o755);

const COPY_TIMEOUT_S = 3;
const ctx = useCabind({
  args: ['--bin-dir', binDir, '--recording-copy-timeout-s', String(COPY_TIMEOUT_S)],
});
let s;
let created;

// One session for the file, made by the first test (after useCabind's start).
async function session() {
  created ??= ctx.server.createSession({ resolution: { width: 1280, height: 800 } }).then((r) => {
    s = r;
  });
  await created;
}

after(async () => {
  await removeTree(binDir);
});

// Runs `work` while /healthz is asked every few milliseconds; resolves with work's result and
// the slowest /healthz answer.
async function whileProbingHealth(work) {
  let done = false;
  let slowest = 0;
  const probe = (async () => {
    while (!done) {
      const t0 = performance.now();
      const r = await fetch(`${ctx.server.base}/healthz`);
      await r.text();
      assert.equal(r.status, 200);
      slowest = Math.max(slowest, performance.now() - t0);
      await new Promise((res) => setTimeout(res, 5));
    }
  })();
  try {
    return { result: await work(), slowest };
  } finally {
    done = true;
    await probe;
  }
}

// Each refusal names its reason: a timeout would also be a 502, but only after the agent had
// held cabind's request for as long as the endpoint allows.
for (const [name, method, p, body, why] of [
  ['a nesting bomb for exec', 'POST', 'exec', { argv: ['true'] }, /nested deeper than 8/],
  ['a body larger than any computer answer', 'POST', 'computer',
    { actions: [{ op: 'cursor_position' }] }, /answer exceeds \d+ bytes/],
  ['an endless screenshot', 'GET', 'screenshot', undefined, /answer exceeds \d+ bytes/],
]) {
  test(`${name} is a 502 agent_error, and cabind stays responsive`, async () => {
    await session();
    const { result: r, slowest } = await whileProbingHealth(() =>
      ctx.server.api(method, `/v1/sessions/${s.id}/${p}`, body));
    assert.equal(r.status, 502, r.text);
    assert.equal(r.json.error.code, 'agent_error', r.text);
    assert.match(r.json.error.message, why);
    // Against a parse that holds cabind's one event loop; a busy host's scheduling alone delays
    // an answer by tens of ms.
    assert.ok(slowest < 250, `/healthz took ${slowest.toFixed(1)} ms meanwhile`);
  });
}

test('a frame header that lies about its length ends the stream, not cabind', async () => {
  await session();
  const ws = await wsOpen(`ws://${ctx.server.hostPort}/v1/sessions/${s.id}/frames`, {
    headers: { authorization: `Bearer ${ctx.server.key}` },
  });
  const [code, reason] = await once(ws, 'close');
  assert.equal(code, 1001);
  assert.match(String(reason), /length/);
  const health = await fetch(`${ctx.server.base}/healthz`);
  assert.equal(health.status, 200);
});

test('a recording far larger than its max_mb is refused, and not copied', async () => {
  await session();
  const r = await ctx.server.api('POST', `/v1/sessions/${s.id}/recordings`, { max_mb: 1 });
  assert.equal(r.status, 201, r.text);
  const stop = await ctx.server.api('POST', `/v1/sessions/${s.id}/recordings/${r.json.id}/stop`);
  assert.equal(stop.status, 200, stop.text);
  assert.equal(stop.json.status, 'failed', stop.text);
  assert.match(stop.json.reason, /more than max_mb/);
  // max_mb and the margin cabind allows for the encoder's last writes.
  const cap = (1 + 8) << 20;
  assert.ok(stop.json.bytes <= cap, stop.text);
  const dir = path.join(ctx.server.stateDir, 'recordings', s.id);
  let stored = 0;
  for (const name of fs.readdirSync(dir)) {
    if (!name.endsWith('.json')) stored += fs.statSync(path.join(dir, name)).size;
  }
  assert.ok(stored <= cap, `${stored} bytes kept`);
});

test('a recording that stops coming cannot hold the session\'s end', async () => {
  await session();
  const r = await ctx.server.api('POST', `/v1/sessions/${s.id}/recordings`, { max_mb: 2 });
  assert.equal(r.status, 201, r.text);
  const t0 = performance.now();
  const del = await withDeadline(ctx.server.api('DELETE', `/v1/sessions/${s.id}`), 20000,
                                 'DELETE of a session whose recording stalls');
  const took = performance.now() - t0;
  assert.equal(del.status, 200, del.text);
  assert.ok(took < (COPY_TIMEOUT_S + 3) * 1000, `DELETE took ${took.toFixed(0)} ms`);
  const got = await ctx.server.api('GET', `/v1/sessions/${s.id}`);
  assert.equal(got.json.status, 'ended', got.text);
  const list = await ctx.server.api('GET', `/v1/sessions/${s.id}/recordings`);
  assert.equal(list.status, 200, list.text);
  const rec = list.json.recordings.find((x) => x.id === r.json.id);
  assert.equal(rec?.status, 'failed', list.text);
  assert.match(rec.reason, /stopped sending/);
});
