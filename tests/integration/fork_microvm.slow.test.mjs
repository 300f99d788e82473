// Live fork of a microVM session: the source's whole running machine is saved while it pauses a
// moment, and each child is a copy of it, made its own machine. A child continues with the
// source's pages, DOM, JavaScript heap, half-typed form, cookies and storage; its random values
// are its own; children and source then diverge. Slow: the source boots under TCG.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Cdp, waitFor, withDeadline } from './helpers.mjs';
import { shopAndCabind } from './shop_site.mjs';

const { shop, server } = await shopAndCabind();
const BOOT_MS = 240000;
const SPEC = { driver: 'microvm', resources: { vcpus: 2, memory_mb: 2048 }, network: shop.network };

// Runs `expression` in the session's first page.
async function inPage(s, expression) {
  const cdp = await Cdp.connect(s.cdp_url);
  try {
    const { targetInfos } = await cdp.send('Target.getTargets');
    const page = targetInfos.find((t) => t.type === 'page');
    const { sessionId } = await cdp.send('Target.attachToTarget', { targetId: page.targetId, flatten: true });
    const r = await cdp.send('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true }, sessionId);
    return r.result.value;
  } finally {
    await cdp.close();
  }
}

const STATE = "[window.mark, document.cookie, localStorage.getItem('cart'), " +
  "document.getElementById('q').value, document.title]";
const RANDOM = "Array.from(crypto.getRandomValues(new Uint8Array(16))).join(',')";

describe('a live fork of a microVM session', { timeout: BOOT_MS + 400000 }, () => {
  let source;
  const sessions = [];
  before(async () => {
    source = await withDeadline(server.createSession({ ...SPEC, start_url: `${shop.origin}/login` }),
      BOOT_MS, 'the source');
    sessions.push(source);
    // Its page goes on to a page of the logged-in site, then holds state no disk has.
    await inPage(source, `location.href = '${shop.origin}/home'`);
    await waitFor(async () => String(await inPage(source, 'document.title').catch(() => ''))
      .startsWith('hello'), { timeoutMs: 60000, intervalMs: 200, what: 'the source\'s page' });
    await inPage(source, "window.mark = 42; localStorage.setItem('cart', '3 apples'); " +
      "document.body.insertAdjacentHTML('beforeend', '<input id=q>'); " +
      "document.getElementById('q').value = 'half a fo'; true");
  }, { timeout: BOOT_MS + 120000 });
  after(async () => {
    for (const s of sessions) await server.api('DELETE', `/v1/sessions/${s.id}`);
  });

  test('each child continues from the source\'s running machine, and they diverge', async () => {
    const forked = await server.api('POST', `/v1/sessions/${source.id}/fork`, { count: 3 });
    assert.equal(forked.status, 201, forked.text);
    const children = forked.json.sessions;
    sessions.push(...children);
    assert.equal(children.length, 3);
    assert.deepEqual(forked.json.not_copied, []);
    assert.ok(forked.json.copied.includes('page_memory'));
    const expected = [42, 'sid=opensesame; visit=once', '3 apples', 'half a fo',
      'hello opensesame once /home'];
    const randoms = new Set([await inPage(source, RANDOM)]);
    for (const c of children) {
      assert.equal(c.status, 'running');
      assert.notEqual(c.id, source.id);
      assert.deepEqual(await inPage(c, STATE), expected, `${c.id}: the source's state`);
      randoms.add(await inPage(c, RANDOM));
    }
    assert.equal(randoms.size, 4, 'crypto.getRandomValues differs in each');
    assert.deepEqual(await inPage(source, STATE), expected, 'the source runs on, as it was');

    await inPage(children[0], "window.mark = 1; localStorage.setItem('cart', 'empty'); true");
    assert.deepEqual(await inPage(children[1], STATE), expected, 'a sibling keeps its own');
    assert.deepEqual(await inPage(source, STATE), expected, 'the source keeps its own');
    assert.equal(await inPage(children[0], 'window.mark'), 1);
    for (const c of children) {
      assert.equal((await server.api('DELETE', `/v1/sessions/${c.id}`)).status, 200);
    }
  });

  test('forks in a row give no two sessions the same random values', async () => {
    const seen = new Set([await inPage(source, RANDOM)]);
    let children = 0;
    for (let round = 0; round < 2; round++) {
      const forked = await server.api('POST', `/v1/sessions/${source.id}/fork`, { count: 2 });
      assert.equal(forked.status, 201, forked.text);
      for (const c of forked.json.sessions) {
        seen.add(await inPage(c, RANDOM));
        children++;
        assert.equal((await server.api('DELETE', `/v1/sessions/${c.id}`)).status, 200);
      }
    }
    assert.equal(seen.size, children + 1);
  });
});
