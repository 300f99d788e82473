// Capability token expiry against a real cabind started with the shortest token lifetime: the
// cdp_url works, then stops working at its expiry, and a freshly minted one works again.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Cdp, useCabind, waitFor, wsOpen } from './helpers.mjs';

const TTL_S = 10;
const ctx = useCabind({ args: ['--cdp-token-ttl-s', String(TTL_S)] });

test('a cdp_url token expires after --cdp-token-ttl-s and a fresh one works', async () => {
  const t0 = Date.now();
  const s = await ctx.server.createSession({});
  const first = await Cdp.connect(s.cdp_url);
  assert.ok((await first.send('Browser.getVersion')).product);
  await first.close();

  // Try the same URL until it is refused; it must not be refused early.
  const refused = await waitFor(
    async () => {
      try {
        const ws = await wsOpen(s.cdp_url);
        ws.close();
        return null;
      } catch (err) {
        if (!err.status) throw err;
        return { err, at: Date.now() };
      }
    },
    { timeoutMs: (TTL_S + 10) * 1000, intervalMs: 250, what: 'the cdp token to expire' },
  );
  assert.equal(refused.err.status, 401, refused.err.message);
  assert.equal(refused.err.json?.error?.code, 'token_expired');
  assert.ok(refused.at - t0 >= (TTL_S - 1.5) * 1000,
            `refused ${refused.at - t0} ms after create, before the ${TTL_S} s lifetime`);

  const token = new URL(s.cdp_url).searchParams.get('token');
  const list = await ctx.server.api(
    'GET', `/v1/sessions/${s.id}/json/list?token=${encodeURIComponent(token)}`, undefined,
    { key: null });
  assert.equal(list.status, 401);
  assert.equal(list.json?.error?.code, 'token_expired');

  // The session itself lives on; GET mints a new URL that works.
  const got = await ctx.server.api('GET', `/v1/sessions/${s.id}`);
  assert.equal(got.json.status, 'running');
  assert.notEqual(got.json.cdp_url, s.cdp_url);
  const again = await Cdp.connect(got.json.cdp_url);
  assert.ok((await again.send('Browser.getVersion')).product);
  await again.close();
  await ctx.server.deleteSession(s.id);
});
