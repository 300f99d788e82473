// Minted capability tokens against a real cabind: scopes and lifetimes are bounded, revocation
// closes live token-authenticated CDP connections (and only those) and refuses replays, and
// signing keys rotate through the key directory and SIGHUP.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { Cdp, useCabind, waitFor, withDeadline, wsOpen } from './helpers.mjs';

const ctx = useCabind({ args: ['--max-token-ttl-s', '7200'] });

async function mint(id, body) {
  return ctx.server.api('POST', `/v1/sessions/${id}/tokens`, body);
}

function cdpUrl(id, token) {
  return `ws://${ctx.server.hostPort}/v1/sessions/${id}/cdp?token=${encodeURIComponent(token)}`;
}

async function refusal(url) {
  try {
    const ws = await wsOpen(url);
    ws.close();
  } catch (err) {
    if (err.status) return err;
    throw err;
  }
  return null;
}

function payload(token) {
  return Buffer.from(token.split('.')[0], 'base64url').toString('utf8').split('~');
}

test('tokens are minted per scope, bounded by the server maximum and the session', async () => {
  const s = await ctx.server.createSession({ timeout_s: 300 });
  const r = await mint(s.id, { scope: 'cdp', ttl_s: 3600 });
  assert.equal(r.status, 201, r.text);
  assert.equal(r.json.scope, 'cdp');
  // Clamped to the session's end, not the 3600 s asked.
  assert.ok(Date.parse(r.json.expires_at) <= Date.parse(s.expires_at), r.text);
  assert.deepEqual(payload(r.json.token).slice(0, 2), [s.id, 'cdp']);
  // The answer carries the URL the token opens.
  assert.equal(r.json.cdp_url, cdpUrl(s.id, r.json.token));
  assert.equal(r.json.live_view_url, undefined, 'a cdp token opens no live view');
  const cdp = await Cdp.connect(r.json.cdp_url);
  assert.ok((await cdp.send('Browser.getVersion')).product);
  await cdp.close();
  for (const scope of ['view', 'control']) {
    const t = await mint(s.id, { scope });
    assert.equal(t.status, 201, t.text);
    assert.equal(t.json.cdp_url, undefined);
    assert.equal(new URL(t.json.live_view_url).searchParams.get('token'), t.json.token);
    const page = await fetch(t.json.live_view_url);
    assert.equal(page.status, 200, `${scope}: the live view opens`);
    const vnc = await wsOpen(t.json.vnc_url);
    vnc.close();
  }

  for (const [body, field] of [
    [{ scope: 'admin' }, 'scope'],
    [{ scope: 'preview:0' }, 'scope'],
    [{ scope: 'preview:70000' }, 'scope'],
    [{}, 'scope'],
    [{ scope: 'view', ttl_s: 7201 }, 'ttl_s'],
    [{ scope: 'view', ttl_s: 0 }, 'ttl_s'],
    [{ scope: 'view', extra: 1 }, 'extra'],
  ]) {
    const bad = await mint(s.id, body);
    assert.equal(bad.status, 400, `${JSON.stringify(body)}: ${bad.text}`);
    assert.match(bad.json.error.message, new RegExp(field));
  }
  const noKey = await ctx.server.api('POST', `/v1/sessions/${s.id}/tokens`, { scope: 'cdp' },
                                     { key: null });
  assert.equal(noKey.status, 401);
  // A token is not an API key: it cannot mint more tokens.
  const byToken = await ctx.server.api(
    'POST', `/v1/sessions/${s.id}/tokens?token=${encodeURIComponent(r.json.token)}`,
    { scope: 'cdp' }, { key: null });
  assert.equal(byToken.status, 401);

  // Another scope on the CDP bridge is refused with 403, another session's token with 401.
  const view = await mint(s.id, { scope: 'view' });
  const wrongScope = await refusal(cdpUrl(s.id, view.json.token));
  assert.equal(wrongScope?.status, 403);
  assert.equal(wrongScope.json.error.code, 'token_scope');
  const other = await ctx.server.createSession({});
  const foreign = await refusal(cdpUrl(other.id, r.json.token));
  assert.equal(foreign?.status, 401);
  assert.equal(foreign.json.error.code, 'invalid_token');
  await ctx.server.deleteSession(other.id);
  await ctx.server.deleteSession(s.id);
  const gone = await mint(s.id, { scope: 'cdp' });
  assert.equal(gone.status, 404);
});

test('revoke closes live token-authenticated CDP connections and refuses replays', async () => {
  const s = await ctx.server.createSession({});
  const other = await ctx.server.createSession({});
  const t1 = (await mint(s.id, { scope: 'cdp' })).json.token;
  const byToken = await Cdp.connect(cdpUrl(s.id, t1));
  const byCreateUrl = await Cdp.connect(s.cdp_url);
  const byKey = await Cdp.connect(`ws://${ctx.server.hostPort}/v1/sessions/${s.id}/cdp`, {
    headers: { authorization: `Bearer ${ctx.server.key}` },
  });
  const otherSession = await Cdp.connect(other.cdp_url);
  for (const c of [byToken, byCreateUrl, byKey, otherSession]) {
    assert.ok((await c.send('Browser.getVersion')).product);
  }

  const r = await ctx.server.api('POST', `/v1/sessions/${s.id}/tokens/revoke`);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.closed_connections, 2);
  await withDeadline(Promise.all([byToken.closed, byCreateUrl.closed]), 5000,
                     'token-authenticated CDP connections to close');
  // The API key's connection and the other session's are untouched.
  assert.ok((await byKey.send('Browser.getVersion')).product);
  assert.ok((await otherSession.send('Browser.getVersion')).product);

  for (const url of [cdpUrl(s.id, t1), s.cdp_url]) {
    const replay = await refusal(url);
    assert.equal(replay?.status, 401);
    assert.equal(replay.json.error.code, 'token_revoked');
  }
  const list = await ctx.server.api(
    'GET', `/v1/sessions/${s.id}/json/version?token=${encodeURIComponent(t1)}`, undefined,
    { key: null });
  assert.equal(list.status, 401);
  assert.equal(list.json.error.code, 'token_revoked');

  // New tokens carry the new generation and work.
  const got = await ctx.server.api('GET', `/v1/sessions/${s.id}`);
  assert.equal(payload(new URL(got.json.cdp_url).searchParams.get('token'))[4], '1');
  const fresh = await Cdp.connect(got.json.cdp_url);
  assert.ok((await fresh.send('Browser.getVersion')).product);
  await fresh.close();
  await byKey.close();
  await otherSession.close();
  await ctx.server.deleteSession(other.id);
  await ctx.server.deleteSession(s.id);
});

test('signing keys rotate: a new key file and SIGHUP; old tokens verify until removed', async () => {
  const s = await ctx.server.createSession({});
  const keysDir = path.join(ctx.server.stateDir, 'keys');
  const [oldFile] = fs.readdirSync(keysDir).filter((f) => /^token-.*\.key$/.test(f));
  const oldKid = oldFile.slice(6, -4);
  const oldToken = (await mint(s.id, { scope: 'cdp' })).json.token;
  assert.equal(payload(oldToken)[3], oldKid);

  // The documented procedure: a key whose id sorts after the others, then SIGHUP.
  const newKid = 'k5000000000';
  fs.writeFileSync(path.join(keysDir, `token-${newKid}.key`), randomBytes(32).toString('hex'),
                   { mode: 0o600 });
  process.kill(ctx.server.pid, 'SIGHUP');
  const newToken = await waitFor(async () => {
    const t = (await mint(s.id, { scope: 'cdp' })).json.token;
    return payload(t)[3] === newKid ? t : null;
  }, { what: 'the new key to sign' });
  for (const t of [oldToken, newToken]) {
    const c = await Cdp.connect(cdpUrl(s.id, t));
    await c.close();
  }

  fs.rmSync(path.join(keysDir, oldFile));
  process.kill(ctx.server.pid, 'SIGHUP');
  const refused = await waitFor(() => refusal(cdpUrl(s.id, oldToken)),
                                { what: 'the removed key to stop verifying' });
  assert.equal(refused.status, 401);
  assert.equal(refused.json.error.code, 'invalid_token');
  const still = await Cdp.connect(cdpUrl(s.id, newToken));
  await still.close();
  await ctx.server.deleteSession(s.id);
});
