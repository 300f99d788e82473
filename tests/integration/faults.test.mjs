// Faults inside a namespace sandbox: Chromium, Xvfb or cabin-agent killed with SIGKILL from the
// host while a Playwright client drives the page. Within 2 s the session is `failed` with an
// `end_reason` that names what died and how, the client is disconnected, nothing of the sandbox
// is left on the host, and the store and another session carry on.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';

import { chromium } from 'playwright-core';

import { Cdp, sessionProcess, useCabind, waitFor, waitForNoLeftovers } from './helpers.mjs';
import { startShop } from './shop_site.mjs';

const shop = await startShop();
const ctx = useCabind({ args: shop.cabindArgs });
let bystander;
let bystanderCdp;

after(async () => {
  await bystanderCdp?.close();
  shop.close();
});

// Another session, made once, that must not notice any of this.
async function bystanderStarted() {
  if (bystander) return;
  bystander = await ctx.server.createSession({});
  bystanderCdp = await Cdp.connect(bystander.cdp_url);
}

async function bystanderWorks() {
  const r = await bystanderCdp.send('Browser.getVersion');
  assert.match(r.product, /Chrome/);
  const list = await ctx.server.api('GET', '/v1/sessions');
  assert.equal(list.status, 200, list.text);
  assert.ok(list.json.sessions.some((s) => s.id === bystander.id && s.status === 'running'));
}

for (const [comm, reason] of [
  ['chromium', 'sandbox exited: Chromium killed by signal 9 (Killed)'],
  ['Xvfb', 'sandbox exited: Xvfb killed by signal 9 (Killed)'],
  ['cabin-agent', 'sandbox exited: cabin-agent killed by signal 9 (Killed)'],
]) {
  test(`SIGKILL of ${comm} during use fails the session within 2 s and leaves nothing`, async () => {
    await bystanderStarted();
    const s = await ctx.server.createSession({});
    const browser = await chromium.connectOverCDP(s.cdp_url);
    const disconnected = new Promise((resolve) => browser.once('disconnected', resolve));
    const page = browser.contexts()[0].pages()[0];
    // The client keeps the page busy until the kill ends it.
    let rounds = 0;
    const busy = (async () => {
      for (;;) {
        await page.evaluate(() => new Array(1000).fill(0).map((_, i) => i * i).length);
        rounds += 1;
      }
    })().catch((err) => err);
    await waitFor(() => rounds >= 5, { what: 'the client busy with the page' });

    const pid = sessionProcess(s.id, comm);
    const killedAt = Date.now();
    process.kill(pid, 'SIGKILL');
    const ended = await waitFor(async () => {
      const r = await ctx.server.api('GET', `/v1/sessions/${s.id}`);
      return r.status === 200 && ['failed', 'ended'].includes(r.json.status) && r.json;
    }, { timeoutMs: 5000, intervalMs: 20, what: `session ${s.id} to end` });
    const tookMs = Date.now() - killedAt;
    assert.equal(ended.status, 'failed', JSON.stringify(ended));
    assert.equal(ended.end_reason, reason);
    assert.ok(tookMs <= 2000, `the session was failed ${tookMs} ms after the kill`);
    await disconnected;
    assert.ok((await busy) instanceof Error, 'the client\'s call failed');

    await waitForNoLeftovers(s.id, ctx.server.runDir);
    await bystanderWorks();
  });
}

test('a create whose browser dies while its start page loads says what died', async () => {
  // The start page never finishes loading, so the create is still waiting when Chromium dies.
  const creating = ctx.server.api('POST', '/v1/sessions',
    { network: shop.network, start_url: `${shop.origin}/slow`, wait_until: 'load' });
  const starting = await waitFor(async () => {
    const list = await ctx.server.api('GET', '/v1/sessions');
    const s = list.json.sessions.find((x) => x.status === 'starting' && x.id !== bystander?.id);
    if (!s) return false;
    try {
      return { id: s.id, pid: sessionProcess(s.id, 'chromium') };
    } catch {
      return false;  // not started yet
    }
  }, { timeoutMs: 15000, what: 'a starting session with its Chromium' });
  ctx.sessions.add(starting.id);
  process.kill(starting.pid, 'SIGKILL');
  const r = await creating;
  assert.equal(r.status, 503, r.text);
  assert.equal(r.json.error.code, 'sandbox_unavailable');
  assert.match(r.json.error.message, /Chromium killed by signal 9/);
  await waitForNoLeftovers(starting.id, ctx.server.runDir);
});
