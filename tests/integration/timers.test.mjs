// A session's timers against real sessions on the namespace driver: it ends when no one has used
// it for its idle timeout, while a CDP client or a frame viewer keeps it; keepalive and PATCH;
// and 201 comes when the start page has got as far as wait_until asks.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { chromium } from 'playwright-core';

import { Cdp, useCabind, waitFor, waitForNoLeftovers, wsOpen } from './helpers.mjs';

// The start pages' server, on the host's loopback, reached as page.test through the egress
// proxy. /slow.png, /late and /doc answer only when the test lets them (release).
const held = { 'slow.png': [], late: [], doc: [] };
const asked = { 'slow.png': 0, late: 0, doc: 0 };
function release(what) {
  for (const res of held[what].splice(0)) res.end('ok');
}
const site = http.createServer((req, res) => {
  const name = req.url.slice(1);
  if (name in held) {
    asked[name] += 1;
    held[name].push(res);
    return;
  }
  res.setHeader('Content-Type', 'text/html');
  // The page's listeners go on at its load event: a click before it is lost.
  res.end('<body style="margin:0"><div style="width:100vw;height:100vh"></div>' +
          '<img src="/slow.png"><script>window.clicks = 0; window.onload = () => {' +
          '  document.body.addEventListener("click", () => { window.clicks += 1; });' +
          '  if (location.pathname === "/idle") fetch("/late").then(() => { window.late = true; });' +
          '};</script></body>');
});
site.listen(0, '127.0.0.1');
await once(site, 'listening');
const sitePort = site.address().port;
after(() => {
  release('slow.png');
  release('late');
  release('doc');
  site.close();
});

const ctx = useCabind({
  args: ['--egress-resolve', 'page.test=127.0.0.1', '--egress-allow-host-cidr', '127.0.0.1/32',
         '--default-idle-timeout-s', '600'],
});
const pageAt = (p) => ({
  start_url: `http://page.test:${sitePort}${p}`,
  network: { mode: 'allowlist', allow: [{ host: 'page.test', ports: [sitePort] }] },
});

async function get(id) {
  const r = await ctx.server.api('GET', `/v1/sessions/${id}`);
  assert.equal(r.status, 200, r.text);
  return r.json;
}

// The session's record once it has ended.
function ended(id) {
  return waitFor(async () => {
    const s = await get(id);
    return s.status === 'ended' && s;
  }, { timeoutMs: 20000, intervalMs: 200, what: `session ${id} to end` });
}

async function firstPage(cdpUrl, fn) {
  const browser = await chromium.connectOverCDP(cdpUrl);
  try {
    return await fn(browser.contexts()[0].pages()[0]);
  } finally {
    await browser.close();
  }
}

test('a session no one uses ends at its idle timeout, and leaves nothing', async () => {
  const s = await ctx.server.createSession({ idle_timeout_s: 2 });
  assert.equal(s.idle_timeout_s, 2);
  assert.equal(s.on_idle, 'delete');
  const idle = await get(s.id);
  assert.match(idle.idle_since, /^\d{4}-\d\d-\d\dT/);
  const e = await ended(s.id);
  assert.equal(e.end_reason, 'idle');
  await waitForNoLeftovers(s.id, ctx.server.runDir);
  // The server's default applies without one, capped by a shorter lifetime; 0 turns it off.
  for (const [spec, want] of [[{}, 600], [{ timeout_s: 60 }, 60], [{ idle_timeout_s: 0 }, 0]]) {
    const t = await ctx.server.createSession(spec);
    assert.equal(t.idle_timeout_s, want, JSON.stringify(spec));
    assert.equal((await ctx.server.api('DELETE', `/v1/sessions/${t.id}`)).status, 200);
  }
  for (const [spec, field] of [[{ idle_timeout_s: 61, timeout_s: 60 }, 'idle_timeout_s'],
    [{ idle_timeout_s: -1 }, 'idle_timeout_s'], [{ on_idle: 'sleep' }, 'on_idle'],
    [{ wait_until: 'domcontentloaded' }, 'wait_until']]) {
    const r = await ctx.server.api('POST', '/v1/sessions', spec);
    assert.equal(r.status, 400, `${JSON.stringify(spec)}: ${r.text}`);
    assert.equal(r.json.error.code, 'invalid_request');
    assert.match(r.json.error.message, new RegExp(field));
  }
});

test('a CDP client or a frame viewer keeps a session from being idle; when they go, its idle time starts', async () => {
  const s = await ctx.server.createSession({ idle_timeout_s: 2 });
  const cdp = await Cdp.connect(s.cdp_url);
  const tok = await ctx.server.api('POST', `/v1/sessions/${s.id}/tokens`, { scope: 'view' });
  assert.equal(tok.status, 201, tok.text);
  const frames = await wsOpen(`${ctx.server.base.replace('http', 'ws')}/v1/sessions/${s.id}/frames?token=${tok.json.token}`);
  // Nothing but the two streams touches the session meanwhile (a request would count as use), so
  // what is checked is that it outlives its idle timeout: only time can show that.
  await sleep(5000);
  cdp.ws.close();
  await cdp.closed;
  await sleep(3000);
  const now = await get(s.id);
  assert.equal(now.status, 'running', 'the frame viewer holds it');
  assert.equal(now.idle_since, null);
  const left = Date.now();
  frames.close();
  const e = await ended(s.id);
  assert.equal(e.end_reason, 'idle');
  assert.ok(Date.parse(e.ended_at) >= Math.floor(left / 1000) * 1000 + 1000,
            `ended at ${e.ended_at}, the viewer left at ${new Date(left).toISOString()}`);
});

test('keepalive and PATCH: the idle time starts again, the lifetime moves within bounds', async () => {
  const s = await ctx.server.createSession({ idle_timeout_s: 3 });
  for (let i = 0; i < 3; i++) {
    await sleep(2000);
    const k = await ctx.server.api('POST', `/v1/sessions/${s.id}/keepalive`);
    assert.equal(k.status, 200, k.text);
    assert.equal(k.json.status, 'running');
  }
  const bad = [
    [{ timeout_s: 1 }, /has run \d+ s already/],
    [{ timeout_s: 30, idle_timeout_s: 31 }, /at most timeout_s/],
    [{ timeout_s: 86401 }, /timeout_s/],
    [{ lifetime: 5 }, /lifetime/],
  ];
  for (const [body, why] of bad) {
    const r = await ctx.server.api('PATCH', `/v1/sessions/${s.id}`, body);
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    assert.match(r.json.error.message, why);
  }
  const created = Date.parse(s.created_at);
  const lifetime = Math.ceil((Date.now() - created) / 1000) + 3;
  const p = await ctx.server.api('PATCH', `/v1/sessions/${s.id}`, { timeout_s: lifetime, idle_timeout_s: 0 });
  assert.equal(p.status, 200, p.text);
  assert.equal(p.json.timeout_s, lifetime);
  assert.equal(p.json.idle_timeout_s, 0);
  assert.equal(Date.parse(p.json.expires_at), created + lifetime * 1000);
  const e = await ended(s.id);
  assert.equal(e.end_reason, 'timeout');
  const gone = await ctx.server.api('POST', `/v1/sessions/${s.id}/keepalive`);
  assert.equal(gone.status, 404);
  assert.equal(gone.json.error.code, 'session_ended');
});

test('201 means the start page has loaded: a click sent at once reaches its load-time listener', async () => {
  asked['slow.png'] = 0;
  // The image holds the load event until the server has been asked for it, and a moment more.
  const letGo = waitFor(() => asked['slow.png'] > 0, { timeoutMs: 60000, what: 'the image request' })
    .then(() => sleep(500)).then(() => release('slow.png'));
  const s = await ctx.server.createSession(pageAt('/'));
  await letGo;
  assert.equal(s.wait_until, 'load');
  const c = await ctx.server.api('POST', `/v1/sessions/${s.id}/computer`, {
    actions: [{ op: 'click', x: 640, y: 400 }],
  });
  assert.equal(c.status, 200, c.text);
  await firstPage(s.cdp_url, async (page) => {
    assert.equal(await page.evaluate(() => document.readyState), 'complete');
    await page.waitForFunction(() => window.clicks === 1, null, { timeout: 5000 });
  });
});

test('201 waits for the start page to commit: while its answer is held, the first about:blank is not it', async () => {
  for (const waitUntil of ['commit', 'load']) {
    asked.doc = 0;
    let releasedAt = 0;
    const letGo = waitFor(() => asked.doc > 0, { timeoutMs: 60000, what: 'the start page request' })
      .then(() => sleep(1000)).then(() => {
        releasedAt = Date.now();
        release('doc');
      });
    const s = await ctx.server.createSession({ ...pageAt('/doc'), wait_until: waitUntil });
    const answeredAt = Date.now();
    await letGo;
    assert.ok(answeredAt >= releasedAt, `${waitUntil}: 201 came before the start page answered`);
    await firstPage(s.cdp_url, async (page) => {
      assert.equal(new URL(page.url()).pathname, '/doc');
      assert.equal(await page.evaluate(() => location.pathname), '/doc');
    });
    assert.equal((await ctx.server.api('DELETE', `/v1/sessions/${s.id}`)).status, 200);
  }
});

test('wait_until commit answers before the page has loaded; networkidle after its late request', async () => {
  const s = await ctx.server.createSession({ ...pageAt('/'), wait_until: 'commit' });
  assert.equal(s.wait_until, 'commit');
  await firstPage(s.cdp_url, async (page) => {
    assert.notEqual(await page.evaluate(() => document.readyState), 'complete', 'the image is held');
    release('slow.png');
    await page.waitForFunction(() => document.readyState === 'complete');
  });

  asked.late = 0;
  asked['slow.png'] = 0;
  // After the load event the page asks for /late, which answers a second after it is asked.
  const letGo = waitFor(() => asked['slow.png'] > 0, { timeoutMs: 60000, what: 'the image request' })
    .then(() => release('slow.png'))
    .then(() => waitFor(() => asked.late > 0, { timeoutMs: 60000, what: 'the late request' }))
    .then(() => sleep(1000)).then(() => release('late'));
  const n = await ctx.server.createSession({ ...pageAt('/idle'), wait_until: 'networkidle' });
  await letGo;
  await firstPage(n.cdp_url, async (page) => {
    assert.equal(await page.evaluate(() => window.late), true);
  });
});
