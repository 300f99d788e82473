// Fork on the namespace driver: POST /v1/sessions/{id}/fork {count} makes sessions whose
// browsers continue from the source's cookies (session cookies too), local storage, IndexedDB
// and open pages, each a session of its own that can then diverge; the source runs on. The
// answer says what was copied and what was not (the pages' memory).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';

import { Cdp, sessionProcess, waitFor } from './helpers.mjs';
import { shopAndCabind } from './shop_site.mjs';

const { shop, server } = await shopAndCabind();
const ORIGIN = shop.origin;
const { network } = shop;

// Runs `expression` in each page of the session: [{url, value}], in DevTools' order.
async function inPages(s, expression) {
  const cdp = await Cdp.connect(s.cdp_url);
  try {
    const { targetInfos } = await cdp.send('Target.getTargets');
    const out = [];
    for (const t of targetInfos.filter((x) => x.type === 'page')) {
      const { sessionId } = await cdp.send('Target.attachToTarget', { targetId: t.targetId, flatten: true });
      const r = await cdp.send('Runtime.evaluate', {
        expression, returnByValue: true, awaitPromise: true,
      }, sessionId);
      out.push({ url: t.url, value: r.result.value });
    }
    return out.sort((a, b) => a.url.localeCompare(b.url));
  } finally {
    await cdp.close();
  }
}

test('children continue from the source\'s cookies, storage and pages, and then diverge', async () => {
  const source = await server.createSession({ network, start_url: `${ORIGIN}/login` });
  // Logged in (a lasting cookie and a session one), a cart in local storage, two pages open.
  // An order in IndexedDB, committed before the page moves on.
  const ordered = await inPages(source, `new Promise((done, fail) => {
    const open = indexedDB.open('shop', 1);
    open.onupgradeneeded = () => open.result.createObjectStore('orders');
    open.onerror = () => fail(open.error);
    open.onsuccess = () => {
      const tx = open.result.transaction('orders', 'readwrite');
      tx.objectStore('orders').put('2 pears', 'last');
      tx.oncomplete = () => done('stored');
      tx.onerror = () => fail(tx.error);
    };
  })`);
  assert.equal(ordered[0].value, 'stored');
  await inPages(source, `localStorage.setItem('cart', '3 apples'); location.href = '${ORIGIN}/home'`);
  const cdp = await Cdp.connect(source.cdp_url);
  await cdp.send('Target.createTarget', { url: `${ORIGIN}/second` });
  await cdp.close();
  await waitFor(async () => (await inPages(source, 'document.title')).map((p) => p.value).join('|') ===
                'hello opensesame once /home|hello opensesame once /second',
                { timeoutMs: 15000, what: 'the source\'s two pages' });
  // Chromium writes local storage to its profile a few seconds after a change: wait for it.
  // Read from the host, through the browser's own view of its files: exec'd commands run as a
  // uid of their own and cannot read the browser's profile.
  const storage = `/proc/${sessionProcess(source.id, 'chromium')}/root/home/cabin/chromium/Default/Local Storage`;
  await waitFor(() => {
    const found = execFileSync('sh', ['-c', `grep -rl "3 apples" "${storage}" || true`]).toString();
    return found.trim() !== '';
  }, { timeoutMs: 30000, intervalMs: 500, what: 'the cart to reach the source\'s disk' });

  const forked = await server.api('POST', `/v1/sessions/${source.id}/fork`, { count: 2 });
  assert.equal(forked.status, 201, forked.text);
  assert.equal(forked.json.source, source.id);
  assert.ok(forked.json.copied.includes('cookies'));
  assert.ok(forked.json.not_copied.includes('page_memory'));
  const children = forked.json.sessions;
  assert.equal(children.length, 2);
  const ids = new Set([source.id, ...children.map((c) => c.id)]);
  assert.equal(ids.size, 3, 'each child is a session of its own');
  const tokens = new Set([source, ...children].map((s) => new URL(s.cdp_url).searchParams.get('token')));
  assert.equal(tokens.size, 3, 'each with its own tokens');
  for (const c of children) {
    assert.equal(c.status, 'running');
    assert.deepEqual(c.network, source.network, 'a copy of the policy');
    const pages = await inPages(c, "[document.title, localStorage.getItem('cart')]");
    assert.deepEqual(pages.map((p) => new URL(p.url).pathname), ['/home', '/second']);
    for (const p of pages) {
      assert.match(p.value[0], /^hello opensesame once \//, `${c.id}: logged in, its session cookie too`);
      assert.equal(p.value[1], '3 apples', `${c.id}: the cart`);
    }
    const [order] = await inPages(c, `new Promise((done, fail) => {
      const open = indexedDB.open('shop', 1);
      open.onerror = () => fail(open.error);
      open.onsuccess = () => {
        const get = open.result.transaction('orders').objectStore('orders').get('last');
        get.onsuccess = () => done(get.result ?? null);
        get.onerror = () => fail(get.error);
      };
    })`);
    assert.equal(order.value, '2 pears', `${c.id}: the order in IndexedDB`);
  }

  // They diverge: one empties its cart and logs out; the others keep theirs.
  await inPages(children[0], "localStorage.removeItem('cart'); document.cookie = 'sid=; Max-Age=0; path=/'");
  const [other] = await inPages(children[1], "[document.cookie, localStorage.getItem('cart')]");
  assert.match(other.value[0], /sid=opensesame/);
  assert.equal(other.value[1], '3 apples');
  const [mine] = await inPages(source, "[document.cookie, localStorage.getItem('cart')]");
  assert.match(mine.value[0], /sid=opensesame/, 'the source runs on, as it was');
  assert.equal(mine.value[1], '3 apples');

  for (const s of [source, ...children])
    assert.equal((await server.api('DELETE', `/v1/sessions/${s.id}`)).status, 200);
});

test('a fork works from any page: the start page, one still loading, an error page', async () => {
  for (const [what, url, settled] of [
    ['the start page', null, (p) => p.url === 'about:blank'],
    ['a page still loading', `${ORIGIN}/slow`, (p) => p.value === 'still loading'],
    // Refused by the policy: Chromium shows its error page.
    ['an error page', 'http://refused.test/', (p) => p.url === 'http://refused.test/'],
  ]) {
    const source = await server.createSession({ network });
    try {
      if (url) {
        const [page] = await inPages(source, `location.href = ${JSON.stringify(url)}; 'sent'`);
        assert.equal(page.value, 'sent');
      }
      await waitFor(async () => settled((await inPages(source, 'document.title'))[0]),
                    { timeoutMs: 15000, what: `the source on ${what}` });
      const forked = await server.api('POST', `/v1/sessions/${source.id}/fork`, { count: 1 });
      assert.equal(forked.status, 201, `${what}: ${forked.text}`);
      const [child] = forked.json.sessions;
      try {
        const pages = await inPages(child, 'document.title');
        assert.equal(pages.length, 1, what);
        assert.equal(pages[0].url, url ?? 'about:blank', what);
      } finally {
        await server.deleteSession(child.id);
      }
    } finally {
      await server.deleteSession(source.id);
    }
  }
});

test('a fork is refused while the source is paused, for a bad count, and on another tenant\'s session', async () => {
  const source = await server.createSession({ network });
  for (const [body, status] of [[{ count: 0 }, 400], [{ count: 17 }, 400], [{ count: 'two' }, 400],
                                [{ more: 1 }, 400]]) {
    const r = await server.api('POST', `/v1/sessions/${source.id}/fork`, body);
    assert.equal(r.status, status, `${JSON.stringify(body)}: ${r.text}`);
  }
  const minted = await server.api('POST', '/v1/keys', { name: 'other' });
  const theirs = await fetch(`${server.base}/v1/sessions/${source.id}/fork`, {
    method: 'POST', headers: { authorization: `Bearer ${minted.json.key}` }, body: '{}',
  });
  assert.equal(theirs.status, 404);
  assert.equal((await server.api('POST', `/v1/sessions/${source.id}/pause`)).status, 200);
  const paused = await server.api('POST', `/v1/sessions/${source.id}/fork`, {});
  assert.equal(paused.status, 409, paused.text);
  assert.equal(paused.json.error.code, 'session_paused');
  const live = await server.api('GET', '/v1/sessions');
  assert.deepEqual(live.json.sessions.map((s) => s.id), [source.id], 'no child was made');
  assert.equal((await server.api('DELETE', `/v1/sessions/${source.id}`)).status, 200);
});
