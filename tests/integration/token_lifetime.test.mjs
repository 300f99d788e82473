// A token's lifetime is the most it buys: discovery hands back the caller's own token rather
// than a fresh one, and CDP, VNC and frame connections it let in close when it expires.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test } from 'node:test';

import { useCabind, withDeadline, wsOpen } from './helpers.mjs';

const TTL_S = 3;
const ctx = useCabind();
let s;
let created;

// One session for the file, made by the first test that needs it (after useCabind's start).
async function session() {
  created ??= ctx.server.createSession({}).then((r) => {
    s = r;
  });
  await created;
}

async function mint(scope) {
  await session();
  const r = await ctx.server.api('POST', `/v1/sessions/${s.id}/tokens`, { scope, ttl_s: TTL_S });
  assert.equal(r.status, 201, r.text);
  return r.json;
}

function wsUrl(path, token) {
  return `ws://${ctx.server.hostPort}/v1/sessions/${s.id}/${path}?token=${encodeURIComponent(token)}`;
}

test('discovery with a short token answers with that token, not a longer one', async () => {
  const t = await mint('cdp');
  for (const p of ['json/version', 'json/list']) {
    const r = await ctx.server.api('GET', `/v1/sessions/${s.id}/${p}?token=${encodeURIComponent(t.token)}`,
      undefined, { key: null });
    assert.equal(r.status, 200, r.text);
    const urls = [r.json].flat().map((e) => e.webSocketDebuggerUrl).filter(Boolean);
    assert.ok(urls.length > 0, r.text);
    for (const u of urls) assert.equal(new URL(u).searchParams.get('token'), t.token, p);
  }
  // With the API key, discovery still mints a URL that works on its own.
  const keyed = await ctx.server.api('GET', `/v1/sessions/${s.id}/json/version`);
  assert.equal(keyed.status, 200, keyed.text);
  assert.notEqual(new URL(keyed.json.webSocketDebuggerUrl).searchParams.get('token'), t.token);
});

for (const [name, scope, path] of [
  ['a CDP connection', 'cdp', 'cdp'],
  ['a VNC connection', 'control', 'vnc'],
  ['a frame stream', 'view', 'frames'],
]) {
  test(`${name} closes when its token expires`, async () => {
    const t = await mint(scope);
    const expiresAt = Date.parse(t.expires_at);
    const ws = await wsOpen(wsUrl(path, t.token));
    const closed = once(ws, 'close');
    await withDeadline(closed, TTL_S * 1000 + 8000, `${name} to close after its token expired`);
    // expires_at is whole seconds: the close comes at or after it, never a second early.
    assert.ok(Date.now() >= expiresAt - 1000,
      `closed ${expiresAt - Date.now()} ms before the token's expiry`);
  });
}
