// The web UI end to end: cabind serving the built console and live view (types, caching, CSP,
// nothing outside the build), and a real headless Chromium using them: sign in, create, list,
// copy and delete sessions in the console; refused live view links say why.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';

import { rawHttp, useCabind, waitFor } from './helpers.mjs';

const CHROMIUM_ARGS = ['--no-first-run', '--disable-background-networking',
                              '--disable-component-update', '--disable-sync'];

const ctx = useCabind();

// Launches the host's Chromium for a person's browser (not a sandbox's).
function launchBrowser() {
  return chromium.launch({ executablePath: '/usr/bin/chromium', args: CHROMIUM_ARGS });
}

function assetsOf(html) {
  return [...html.matchAll(/(?:src|href)="(\/ui\/[^"]+)"/g)].map((m) => m[1]);
}

describe('serving the web UI', () => {
  test('/ is the console page with its security headers and revalidation', async () => {
    const { base } = ctx.server;
    const res = await fetch(base + '/');
    const html = await res.text();
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'text/html; charset=utf-8');
    assert.match(html, /<title>Cabin<\/title>/);
    assert.equal(res.headers.get('cache-control'), 'no-cache');
    const csp = res.headers.get('content-security-policy');
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'(;|$)/);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
    assert.equal(res.headers.get('referrer-policy'), 'no-referrer');
    const etag = res.headers.get('etag');
    assert.match(etag, /^"[0-9a-f]{16}-\d+"$/);
    const again = await fetch(base + '/', { headers: { 'if-none-match': etag } });
    assert.equal(again.status, 304);
    assert.equal((await again.arrayBuffer()).byteLength, 0);
  });

  test('the assets the pages name are served with their types and cached for good', async () => {
    const { base } = ctx.server;
    const html = await (await fetch(base + '/')).text();
    const assets = assetsOf(html);
    assert.ok(assets.some((a) => a.endsWith('.js')), `a script in ${assets}`);
    assert.ok(assets.some((a) => a.endsWith('.css')), `a stylesheet in ${assets}`);
    for (const a of assets) {
      const res = await fetch(base + a);
      const body = await res.text();
      assert.equal(res.status, 200, a);
      assert.equal(res.headers.get('content-type'),
                   a.endsWith('.js') ? 'text/javascript; charset=utf-8' : 'text/css; charset=utf-8');
      assert.equal(res.headers.get('cache-control'), 'public, max-age=31536000, immutable');
      assert.ok(body.length > 100, `${a} has content`);
    }
    // The scripts are bundles: nothing loads from anywhere but cabind.
    for (const a of assets.filter((x) => x.endsWith('.js'))) {
      const body = await (await fetch(base + a)).text();
      assert.doesNotMatch(body, /\bimport\s*\(?\s*["']https?:/, `${a} imports nothing remote`);
    }
  });

  test('nothing but the build can be named: traversal, other files, pages under /ui/', async () => {
    const { base, port } = ctx.server;
    for (const p of ['/ui/nope.js', '/ui/index.html', '/ui/live.html', '/index.html', '/ui/',
                     '/ui/..%2f..%2fstate%2fapi-key', '/favicon.ico']) {
      const res = await fetch(base + p);
      assert.equal(res.status, 404, p);
      assert.equal((await res.json()).error.code, 'not_found', p);
    }
    // Raw targets, as fetch would normalise them.
    for (const target of ['/ui/../v1/info', '/ui/../../etc/passwd', '/ui/./index.html',
                          '/ui/%2e%2e', '/ui/%2e%2e/%2e%2e/etc/passwd', '/ui/.%2e/api-key',
                          '/ui//etc/passwd', '/ui/a/../index.html']) {
      const res = await rawHttp(port, `GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
      assert.equal(res.status, 404, target);
      assert.equal(res.json?.error?.code, 'not_found', target);
    }
    const post = await fetch(base + '/', { method: 'POST' });
    assert.equal(post.status, 405);
  });

  test('the console page is public; what it calls needs the key', async () => {
    const { base } = ctx.server;
    assert.equal((await fetch(base + '/')).status, 200);
    const list = await fetch(base + '/v1/sessions');
    assert.equal(list.status, 401);
  });
});

describe('live view links that cabind refuses', () => {
  let s;
  before(async () => {
    s = await ctx.server.createSession({ resolution: { width: 800, height: 600 } });
  });
  after(async () => {
    if (s) await ctx.server.api('DELETE', `/v1/sessions/${s.id}`);
  });

  test('create answers with a live_view_url carrying a view token', async () => {
    const { base } = ctx.server;
    const u = new URL(s.live_view_url);
    assert.equal(u.origin, base);
    assert.equal(u.pathname, `/v1/sessions/${s.id}/live`);
    const token = u.searchParams.get('token');
    assert.ok(token);
    const scope = Buffer.from(token.split('.')[0], 'base64url').toString().split('~')[1];
    assert.equal(scope, 'view');
    const got = await ctx.server.api('GET', `/v1/sessions/${s.id}`);
    assert.match(got.json.live_view_url, /\/live\?token=/);

    const page = await fetch(s.live_view_url);
    assert.equal(page.status, 200);
    assert.equal(page.headers.get('content-type'), 'text/html; charset=utf-8');
    assert.equal(page.headers.get('cache-control'), 'no-store');
    assert.equal(page.headers.get('etag'), null);
    assert.match(await page.text(), /<title>Cabin live view<\/title>/);

    const status = await fetch(`${base}/v1/sessions/${s.id}/live/status?token=${token}`);
    assert.equal(status.status, 200);
    const sj = await status.json();
    assert.equal(sj.id, s.id);
    assert.equal(sj.status, 'running');
    assert.equal(sj.scope, 'view');
    assert.deepEqual(sj.resolution, { width: 800, height: 600 });
    assert.ok(Date.parse(sj.expires_at) > Date.now());
  });

  test('a missing, forged, cdp-scoped or other-session token gets a page that says why', async () => {
    const { base } = ctx.server;
    const other = await ctx.server.createSession({ resolution: { width: 640, height: 480 } });
    const viewToken = new URL(s.live_view_url).searchParams.get('token');
    const cdpToken = new URL(s.cdp_url).searchParams.get('token');
    const otherToken = new URL(other.live_view_url).searchParams.get('token');
    const forged = viewToken.slice(0, -4) + (viewToken.endsWith('AAAA') ? 'BBBB' : 'AAAA');
    const browser = await launchBrowser();
    try {
      const page = await browser.newPage();
      for (const [token, code, words] of [
        [null, 'unauthenticated', /no token/],
        [otherToken, 'invalid_token', /not valid/],
        [cdpToken, 'invalid_token', /not valid/],
        [forged, 'invalid_token', /not valid/],
      ]) {
        const url = `${base}/v1/sessions/${s.id}/live` + (token ? `?token=${token}` : '');
        const res = await page.goto(url);
        assert.equal(res.status(), 401, `${code}: status`);
        assert.match(await page.textContent('#error-title'), words);
        assert.equal(await page.textContent('#error-code'), code);
        const status = await fetch(`${base}/v1/sessions/${s.id}/live/status` +
                                   (token ? `?token=${token}` : ''));
        assert.equal(status.status, 401);
        assert.equal((await status.json()).error.code, code);
      }
      assert.match(await (await fetch(`${base}/v1/sessions/${s.id}/live?token=${otherToken}`)).text(),
                   /another session/);
    } finally {
      await browser.close();
      await ctx.server.deleteSession(other.id);
    }
  });

  test('after the session ends its link says so', async () => {
    const { base } = ctx.server;
    const gone = await ctx.server.createSession({ resolution: { width: 640, height: 480 } });
    const token = new URL(gone.live_view_url).searchParams.get('token');
    await ctx.server.deleteSession(gone.id);
    const status = await fetch(`${base}/v1/sessions/${gone.id}/live/status?token=${token}`);
    assert.equal(status.status, 404);
    const body = await status.json();
    assert.equal(body.error.code, 'session_ended');
    assert.match(body.error.message, /deleted/);
    const browser = await launchBrowser();
    try {
      const page = await browser.newPage();
      await page.goto(gone.live_view_url);
      await page.waitForSelector('#conn-state[data-state=ended]');
      assert.match(await page.textContent('#conn-state'), /session ended: deleted/);
    } finally {
      await browser.close();
    }
  });
});

describe('the console in Chromium', () => {
  let browser;
  before(async () => {
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
  });

  test('sign in, create, list, copy the cdp_url, open the live link, delete', async () => {
    const { base, key } = ctx.server;
    const context = await browser.newContext({ permissions: ['clipboard-read', 'clipboard-write'] });
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
    await page.goto(base + '/');

    // A wrong key is refused on the form.
    await page.fill('#api-key', 'not-the-key');
    await page.click('#sign-in-form button[type=submit]');
    await page.waitForSelector('#sign-in-error:has-text("not valid")');
    assert.equal(await page.isVisible('#sessions-panel'), false);

    await page.fill('#api-key', key);
    await page.click('#sign-in-form button[type=submit]');
    await page.waitForSelector('#sessions-panel', { state: 'visible' });
    assert.match(await page.textContent('#server-info'), /cabind \d+\.\d+/);
    const drivers = await page.$$eval('#create-driver option:not([disabled])', (os) =>
      os.map((o) => o.value));
    assert.ok(drivers.includes('namespace'), `drivers offered: ${drivers}`);

    // The key stays for this tab: a reload is still signed in.
    await page.reload();
    await page.waitForSelector('#sessions-panel', { state: 'visible' });
    assert.equal(await page.evaluate(() => sessionStorage.getItem('cabin.apiKey')), key);

    await page.selectOption('#create-driver', 'namespace');
    await page.fill('#create-width', '900');
    await page.fill('#create-height', '650');
    await page.click('#create-button');
    const created = await page.waitForSelector('#create-state:has-text("Created ses_")',
                                               { timeout: 60000 });
    const id = /ses_[a-z0-9]{20}/.exec(await created.textContent())[0];
    ctx.sessions.add(id);
    const row = `#sessions-body tr[data-id="${id}"]`;
    await page.waitForSelector(row);
    assert.equal(await page.textContent(`${row} td.status`), 'running');
    assert.equal(await page.textContent(`${row} td.driver`), 'namespace');
    assert.match(await page.textContent(row), /900×650/);

    // What the console shows is what the API says.
    const api = (await ctx.server.api('GET', `/v1/sessions/${id}`)).json;
    assert.equal(api.status, 'running');
    assert.deepEqual(api.resolution, { width: 900, height: 650 });
    await page.click(`${row} button.copy-cdp`);
    await page.waitForSelector('#list-state:has-text("Copied the CDP URL")');
    const copied = await page.evaluate(() => navigator.clipboard.readText());
    const cdp = new URL(copied);
    assert.equal(cdp.pathname, `/v1/sessions/${id}/cdp`);
    assert.ok(cdp.searchParams.get('token'));
    const href = await page.getAttribute(`${row} a.live-link`, 'href');
    assert.equal(new URL(href).pathname, `/v1/sessions/${id}/live`);
    assert.equal(await page.getAttribute(`${row} a.live-link`, 'target'), '_blank');

    // The live link opens the viewer in a new tab, without the key.
    const [viewer] = await Promise.all([context.waitForEvent('page'), page.click(`${row} a.live-link`)]);
    await viewer.waitForLoadState();
    assert.equal(new URL(viewer.url()).pathname, `/v1/sessions/${id}/live`);
    assert.equal(await viewer.textContent('#session-id'), id);
    await viewer.close();

    page.once('dialog', (d) => d.accept());
    await page.click(`${row} button.delete`);
    await page.waitForSelector(row, { state: 'detached' });
    await page.waitForSelector('#list-state:has-text("Deleted")');
    const ended = (await ctx.server.api('GET', `/v1/sessions/${id}`)).json;
    assert.equal(ended.status, 'ended');
    assert.equal(ended.end_reason, 'deleted');

    // Ended sessions show on request.
    await page.check('#show-ended');
    await page.waitForSelector(`${row} td.status:has-text("ended (deleted)")`);

    // Signing out forgets the key.
    await page.click('#sign-out');
    await page.waitForSelector('#sign-in-panel', { state: 'visible' });
    assert.equal(await page.evaluate(() => sessionStorage.getItem('cabin.apiKey')), null);
    assert.deepEqual(errors.filter((e) => !/status of 40[14]/.test(e)), []);
    await context.close();
  });

  test('a failed create says why, and a key that stops working signs the console out', async () => {
    const { base, key } = ctx.server;
    const page = await browser.newPage();
    await page.goto(base + '/');
    await page.fill('#api-key', key);
    await page.click('#sign-in-form button[type=submit]');
    await page.waitForSelector('#sessions-panel', { state: 'visible' });
    await page.fill('#create-width', '50');
    // The browser's own range check would stop the form; cabind's message is the one to show.
    await page.$eval('#create-width', (el) => el.removeAttribute('min'));
    await page.click('#create-button');
    await page.waitForSelector('#create-state.error');
    assert.match(await page.textContent('#create-state'), /resolution\.width.*invalid_request/);

    await page.evaluate(() => sessionStorage.setItem('cabin.apiKey', 'revoked-key'));
    await page.reload();
    await page.waitForSelector('#sign-in-panel', { state: 'visible' });
    assert.match(await page.textContent('#sign-in-error'), /not valid/);
    await page.close();
  });

  test('no session id leaks into the console without a key', async () => {
    const { base } = ctx.server;
    const s = await ctx.server.createSession({});
    const page = await browser.newPage();
    await page.goto(base + '/');
    await page.waitForSelector('#sign-in-panel', { state: 'visible' });
    assert.doesNotMatch(await page.content(), /ses_[a-z0-9]{20}/);
    assert.doesNotMatch(await page.content(), new RegExp(s.id));
    await page.close();
    await ctx.server.deleteSession(s.id);
  });
});
