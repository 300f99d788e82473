// The web UI end to end: cabind serving the built console and live view (types, caching, CSP,
// nothing outside the build), and a real headless Chromium using them: sign in, create, list,
// copy and delete sessions in the console; the live view shows the sandbox's screen through
// noVNC, a control link clicks and types into the sandbox's page and a view link cannot (cabind
// drops its input even when the page is made to send it), screenshots, reconnection after a
// dropped connection, and refused or ended links that say why.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';

import { pngSize, rawHttp, useCabind, waitFor } from './helpers.mjs';

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
      for (const [token, httpStatus, code, words] of [
        [null, 401, 'unauthenticated', /no token/],
        [otherToken, 401, 'invalid_token', /not valid/],
        [cdpToken, 403, 'token_scope', /does not open/],
        [forged, 401, 'invalid_token', /not valid/],
      ]) {
        const url = `${base}/v1/sessions/${s.id}/live` + (token ? `?token=${token}` : '');
        const res = await page.goto(url);
        assert.equal(res.status(), httpStatus, `${code}: status`);
        assert.match(await page.textContent('#error-title'), words);
        assert.equal(await page.textContent('#error-code'), code);
        const status = await fetch(`${base}/v1/sessions/${s.id}/live/status` +
                                   (token ? `?token=${token}` : ''));
        assert.equal(status.status, httpStatus);
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
      const res = await page.goto(gone.live_view_url);
      assert.equal(res.status(), 404);
      assert.equal(await page.textContent('#error-title'), 'This session has ended.');
      assert.equal(await page.textContent('#error-message'), 'the session ended: deleted');
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
    assert.equal(await page.textContent(`${row} .driver`), 'namespace');
    assert.match(await page.textContent(row), /900×650/);

    // What the console shows is what the API says.
    const api = (await ctx.server.api('GET', `/v1/sessions/${id}`)).json;
    assert.equal(api.status, 'running');
    assert.deepEqual(api.resolution, { width: 900, height: 650 });
    // The copies are in the row's "More" menu.
    await page.click(`${row} .menu-button`);
    await page.click(`${row} button.copy-cdp`);
    await page.waitForSelector('#list-state:has-text("Copied the CDP URL")');
    const copied = await page.evaluate(() => navigator.clipboard.readText());
    const cdp = new URL(copied);
    assert.equal(cdp.pathname, `/v1/sessions/${id}/cdp`);
    assert.ok(cdp.searchParams.get('token'));
    await page.click(`${row} .menu-button`);
    await page.click(`${row} button.copy-live`);
    await page.waitForSelector('#list-state:has-text("Copied the live view URL")');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), api.live_view_url);
    await page.click(`${row} .menu-button`);
    await page.click(`${row} button.copy-id`);
    await page.waitForSelector('#list-state:has-text("Copied the ID")');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), id);

    // The row's thumbnail is the screen, streamed small; the list's refreshes keep its stream.
    const thumb = `${row} td.thumb img`;
    await page.waitForFunction((sel) => document.querySelector(sel)?.naturalWidth === 192, thumb,
                               { timeout: 20000 });
    assert.match(await page.getAttribute(thumb, 'src'), /\/frames\.mjpeg\?.*token=/);
    await page.evaluate((sel) => { window.firstThumb = document.querySelector(sel); }, thumb);
    await page.click('#refresh');
    await page.waitForFunction((sel) => document.querySelector(sel) === window.firstThumb, thumb);

    // Its logs, read through the API with the key.
    await page.click(`${row} button.logs`);
    await page.waitForSelector('#logs-panel', { state: 'visible' });
    await page.waitForFunction(() => !/^Loading/.test(document.querySelector('#logs-body').textContent));
    const logs = await page.textContent('#logs-body');
    assert.doesNotMatch(logs, /^Cannot read/);
    const apiLogs = (await ctx.server.api('GET', `/v1/sessions/${id}/logs`)).json.lines;
    assert.ok(apiLogs.length > 0 && logs.includes(apiLogs[0]), 'the panel shows the API\'s lines');
    await page.click('#logs-close');
    assert.equal(await page.isVisible('#logs-panel'), false);

    const href = await page.getAttribute(`${row} a.live-link`, 'href');
    assert.equal(new URL(href).pathname, `/v1/sessions/${id}/live`);
    assert.equal(await page.getAttribute(`${row} a.live-link`, 'target'), '_blank');

    // The live link opens the viewer in a new tab, without the key.
    const [viewer] = await Promise.all([context.waitForEvent('page'), page.click(`${row} a.live-link`)]);
    await viewer.waitForLoadState();
    assert.equal(new URL(viewer.url()).pathname, `/v1/sessions/${id}/live`);
    // The page's script fills it in; the load event can come first under load.
    await viewer.waitForFunction((want) => document.querySelector('#session-id')?.textContent === want, id);
    await viewer.waitForSelector('#conn-state[data-state=connected]', { timeout: 20000 });
    assert.equal(await viewer.isVisible('#control-toggle'), false, 'live_view_url only watches');
    await viewer.close();

    // "Take over" mints a control link through the API and opens it.
    const [controller] = await Promise.all([context.waitForEvent('page'),
                                            page.click(`${row} button.control-link`)]);
    await controller.waitForURL(/\/live\?token=/);
    assert.equal(new URL(controller.url()).pathname, `/v1/sessions/${id}/live`);
    await controller.waitForSelector('#control-toggle', { state: 'visible', timeout: 20000 });
    const scope = await controller.evaluate(async () => (await (await fetch(
      location.pathname + '/status' + location.search)).json()).scope);
    assert.equal(scope, 'control');
    await controller.close();

    page.once('dialog', (d) => d.accept());
    await page.click(`${row} .menu-button`);
    await page.click(`${row} button.delete`);
    await page.waitForSelector(row, { state: 'detached' });
    await page.waitForSelector('#list-state:has-text("Deleted")');
    const ended = (await ctx.server.api('GET', `/v1/sessions/${id}`)).json;
    assert.equal(ended.status, 'ended');
    assert.equal(ended.end_reason, 'deleted');

    // Ended sessions show on request.
    await page.check('#show-ended');
    await page.waitForSelector(`${row} td.status .badge:has-text("ended")`);
    assert.equal(await page.textContent(`${row} td.status .reason`), 'deleted');

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

// A page for the sandbox's Chromium: a box of a known colour, a text field, and a log of the
// input that reaches the page.
const BOX = [20, 160, 60];
const SANDBOX_PAGE = `<!doctype html><title>target</title>
<style>body{margin:0;background:#fff} #box{position:absolute;left:0;top:0;width:100%;height:55%;
background:rgb(${BOX.join(',')})} textarea{position:absolute;left:60px;top:65%;width:50%;height:20%;
font-size:20px}</style><div id=box></div><textarea id=t></textarea>
<script>
window.log = [];
for (const t of ['mousedown', 'keydown']) addEventListener(t, (e) => window.log.push(
  {type: e.type, key: e.key, x: e.screenX, y: e.screenY}), true);
</script>`;

// A TCP relay to cabind: cut() drops every connection through it at once.
function tcpRelay(port) {
  const pairs = new Set();
  let websockets = 0;
  const server = net.createServer((client) => {
    const upstream = net.connect(port, '127.0.0.1');
    const pair = [client, upstream];
    pairs.add(pair);
    client.once('data', (d) => {
      if (/^GET \S+\/vnc\?/.test(d.toString('latin1'))) websockets += 1;
    });
    client.pipe(upstream).pipe(client);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      pairs.delete(pair);
    };
    for (const sock of pair) {
      sock.on('error', drop);
      sock.on('close', drop);
    }
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({
    port: server.address().port,
    websockets: () => websockets,
    cut: () => {
      for (const pair of [...pairs]) for (const sock of pair) sock.destroy();
    },
    close: () => {
      server.close();
      for (const pair of [...pairs]) for (const sock of pair) sock.destroy();
    },
  })));
}

const near = (a, b, tol = 16) => a.every((v, i) => Math.abs(v - b[i]) <= tol);

describe('the live view in Chromium', () => {
  const W = 1024;
  const H = 768;
  let s, sandbox, target, browser;

  // Mints a token through the API.
  const mint = async (scope, ttl_s = 600) => {
    const r = await ctx.server.api('POST', `/v1/sessions/${s.id}/tokens`, { scope, ttl_s });
    assert.equal(r.status, 201, r.text);
    return r.json.token;
  };
  const liveUrl = (token) => `${ctx.server.base}/v1/sessions/${s.id}/live?token=${token}`;

  // Screen coordinates of a point in the sandbox's page (its toolbar is above the page).
  const screenPoint = async (fx, fy) => target.evaluate(([fx, fy]) => [
    Math.round(window.screenX + (window.outerWidth - window.innerWidth) + fx * window.innerWidth),
    Math.round(window.screenY + (window.outerHeight - window.innerHeight) + fy * window.innerHeight),
  ], [fx, fy]);

  // Opens a viewer page and waits until noVNC has connected.
  const openViewer = async (url) => {
    const page = await browser.newPage({ viewport: { width: 900, height: 700 } });
    page.on('pageerror', (e) => { page.errors = [...(page.errors || []), e.message]; });
    await page.goto(url);
    await page.waitForSelector('#conn-state[data-state=connected]', { timeout: 20000 });
    return page;
  };

  // The colour noVNC shows at screen pixel (x, y), read from its canvas.
  const canvasPixel = (page, [x, y]) => page.$eval('#screen canvas', (c, [x, y]) =>
    [...c.getContext('2d').getImageData(x, y, 1, 1).data.slice(0, 3)], [x, y]);

  // Where screen pixel (x, y) is on the viewer's page, as noVNC scales the screen to fit.
  const viewerPoint = (page, [x, y]) => page.$eval('#screen canvas', (c, [x, y]) => {
    const r = c.getBoundingClientRect();
    return [r.left + (x + 0.5) * r.width / c.width, r.top + (y + 0.5) * r.height / c.height];
  }, [x, y]);

  // Returns once the viewer has sent cabind everything it sent before: two screen changes it
  // then shows took two update requests, and the second left after the first change arrived.
  const flushViewer = async (page) => {
    const inBox = await screenPoint(0.5, 0.25);
    for (const c of [[0, 0, 200], BOX]) {
      await target.evaluate((c) => { document.getElementById('box').style.background = c; },
                            `rgb(${c.join(',')})`);
      await waitFor(async () => near(await canvasPixel(page, inBox), c),
                    { what: `rgb(${c}) in the viewer` });
    }
  };

  before(async () => {
    s = await ctx.server.createSession({ resolution: { width: W, height: H } });
    sandbox = await chromium.connectOverCDP(s.cdp_url);
    target = sandbox.contexts()[0].pages()[0];
    await target.setContent(SANDBOX_PAGE);
    await target.bringToFront();
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
    await sandbox?.close();
    if (s) await ctx.server.api('DELETE', `/v1/sessions/${s.id}`);
  });

  test('live_view_url shows the sandbox screen, scaled to fit, and follows it', async () => {
    const viewer = await openViewer(s.live_view_url);
    assert.equal(await viewer.isVisible('#control-toggle'), false, 'a view link cannot take control');
    const size = await viewer.$eval('#screen canvas', (c) => {
      const r = c.getBoundingClientRect();
      return { w: c.width, h: c.height, cssW: r.width, cssH: r.height };
    });
    assert.deepEqual([size.w, size.h], [W, H], 'the canvas holds the whole screen');
    assert.ok(size.cssW <= 900 && size.cssH <= 700 - 30, `scaled to fit: ${JSON.stringify(size)}`);
    assert.ok(size.cssW >= 880 || size.cssH >= 600, `and fills the window: ${JSON.stringify(size)}`);

    const inBox = await screenPoint(0.5, 0.25);
    await waitFor(async () => near(await canvasPixel(viewer, inBox), BOX),
                  { what: `the box's colour at ${inBox} in the viewer`, timeoutMs: 15000 });
    // What the viewer shows agrees with cabind's own screenshot around the box's corner.
    const corner = await screenPoint(0, 0.55);
    const below = [corner[0] + 20, corner[1] + 10];
    assert.ok(!near(await canvasPixel(viewer, below), BOX), 'below the box is not the box');

    await target.evaluate(() => { document.getElementById('box').style.background = 'rgb(200,30,30)'; });
    await waitFor(async () => near(await canvasPixel(viewer, inBox), [200, 30, 30]),
                  { what: 'the new colour in the viewer', timeoutMs: 10000 });
    await target.evaluate((c) => { document.getElementById('box').style.background = c; },
                          `rgb(${BOX.join(',')})`);

    // The screenshot button saves the screen as a PNG.
    const [download] = await Promise.all([viewer.waitForEvent('download'),
                                          viewer.click('#screenshot')]);
    assert.match(download.suggestedFilename(), new RegExp(`^${s.id}-.*\\.png$`));
    assert.deepEqual(pngSize(fs.readFileSync(await download.path())), { width: W, height: H });
    assert.deepEqual(viewer.errors ?? [], []);
    await viewer.close();
  });

  test('a control link types and clicks into the sandbox once control is taken', async () => {
    await target.evaluate(() => { window.log = []; document.getElementById('t').value = ''; });
    const viewer = await openViewer(liveUrl(await mint('control')));
    const toggle = viewer.locator('#control-toggle');
    await toggle.waitFor({ state: 'visible' });
    assert.equal(await toggle.textContent(), 'Take control');
    const field = await screenPoint(0.3, 0.75);
    await waitFor(async () => !near(await canvasPixel(viewer, field), BOX, 4),
                  { what: 'the page in the viewer' });

    await toggle.click();
    await viewer.waitForSelector('#control-toggle[aria-pressed=true]');
    assert.match(await viewer.textContent('#conn-state'), /in control/);
    // The person holds the session's input lock: the agent's input waits its turn.
    const refused = await ctx.server.api('POST', `/v1/sessions/${s.id}/computer`,
                                         { action: 'type', text: 'x' });
    assert.equal(refused.status, 409, refused.text);
    assert.equal(refused.json.error.code, 'human_in_control');
    const [vx, vy] = await viewerPoint(viewer, field);
    await viewer.mouse.click(vx, vy);
    // As a keyboard types: Shift held for the capital.
    await viewer.keyboard.press('Shift+KeyH');
    await viewer.keyboard.type('ello cabin');
    let typed;
    await waitFor(async () => (typed = await target.inputValue('#t')) === 'Hello cabin',
                  { what: 'the typed text in the sandbox page', timeoutMs: 10000 })
      .catch((e) => assert.fail(`${e.message}; the field holds ${JSON.stringify(typed)}`));
    const log = await target.evaluate(() => window.log);
    const down = log.find((e) => e.type === 'mousedown');
    assert.ok(down, 'the click reached the page');
    // Scaling to the viewer and back loses at most a pixel or two.
    assert.ok(Math.abs(down.x - field[0]) <= 2 && Math.abs(down.y - field[1]) <= 2,
              `clicked at ${down.x},${down.y}, meant ${field}`);

    // Released: input stays in the viewer, and the lock is the agent's again.
    await toggle.click();
    await viewer.waitForSelector('#control-toggle[aria-pressed=false]');
    assert.equal(await toggle.textContent(), 'Take control');
    await viewer.mouse.click(vx, vy);
    await viewer.keyboard.type('zz');
    await ctx.server.api('POST', `/v1/sessions/${s.id}/computer`,
                         { action: 'type', text: '.' });
    await waitFor(async () => (await target.inputValue('#t')).endsWith('.'),
                  { what: 'the marker typed through the API' });
    assert.equal(await target.inputValue('#t'), 'Hello cabin.');

    // A person who leaves while in control hands it back.
    await toggle.click();
    await viewer.waitForSelector('#control-toggle[aria-pressed=true]');
    const move = () => ctx.server.api('POST', `/v1/sessions/${s.id}/computer`,
                                      { action: 'mouse_move', coordinate: [5, 5] });
    assert.equal((await move()).status, 409);
    await viewer.close();
    await waitFor(async () => (await move()).status === 200,
                  { what: 'the lock to go with the page', timeoutMs: 10000 });
  });

  test('a view link sends nothing, and cabind drops input a view viewer sends anyway', async () => {
    await target.evaluate(() => { window.log = []; document.getElementById('t').value = ''; });
    const field = await screenPoint(0.3, 0.75);
    await target.click('#t'); // the field has focus: any key that arrived would show in it
    await target.evaluate(() => { window.log = []; });

    const detachLine = (mark) => ctx.server.logSince(mark).map((l) =>
      /RFB viewer detached \(view\): .*? (\d+) of (\d+) messages dropped/.exec(l)).find(Boolean);
    // As the page is, it offers no control and sends nothing.
    const plainMark = ctx.server.logMark();
    const plain = await openViewer(s.live_view_url);
    assert.equal(await plain.isVisible('#control-toggle'), false);
    let [vx, vy] = await viewerPoint(plain, field);
    await plain.mouse.click(vx, vy);
    await plain.keyboard.type('nope');
    await plain.close();
    await waitFor(() => detachLine(plainMark), { what: 'the plain viewer to leave' });

    // Made to believe its view token allows control, the page sends input; cabind drops it.
    const mark = ctx.server.logMark();
    const page = await browser.newPage({ viewport: { width: 900, height: 700 } });
    const held = { held: true, holder: 'live_view', since: null, expires_at: null };
    await page.route('**/live/status?*', async (route) => {
      const res = await route.fetch();
      await route.fulfill({ response: res,
                            json: { ...(await res.json()), scope: 'control', control: held } });
    });
    // cabind refuses the view token the lock too; the page is told it has it.
    await page.route('**/control?*', (route) => route.fulfill({ json: held }));
    await page.goto(s.live_view_url);
    await page.waitForSelector('#conn-state[data-state=connected]', { timeout: 20000 });
    await page.click('#control-toggle');
    await page.waitForSelector('#control-toggle[aria-pressed=true]');
    [vx, vy] = await viewerPoint(page, field);
    await page.mouse.click(vx, vy);
    await page.keyboard.type('nope');
    await flushViewer(page);
    await page.close();
    // cabind counted what it dropped when the viewer left: the click and every key, down and up.
    const line = await waitFor(() => detachLine(mark),
                               { what: 'cabind to log what it dropped from the view viewer' });
    assert.ok(Number(line[1]) >= 'nope'.length * 2 + 2, `cabind logged: ${line[0]}`);

    // Input through the API arrives; nothing from the view viewers did.
    await ctx.server.api('POST', `/v1/sessions/${s.id}/computer`, { action: 'type', text: '.' });
    await waitFor(async () => (await target.inputValue('#t')) === '.',
                  { what: 'the marker typed through the API' });
    const log = await target.evaluate(() => window.log);
    assert.deepEqual(log.filter((e) => e.type === 'mousedown'), []);
    assert.deepEqual(log.filter((e) => e.type === 'keydown').map((e) => e.key), ['.']);
  });

  test('a paused session shows as paused, and as connected again once it is resumed', async () => {
    const page = await openViewer(s.live_view_url);
    const pause = await ctx.server.api('POST', `/v1/sessions/${s.id}/pause`);
    assert.equal(pause.status, 200, pause.text);
    try {
      await page.waitForSelector('#conn-state[data-state=paused]', { timeout: 10000 });
      assert.match(await page.textContent('#conn-state'), /Paused/);
    } finally {
      const resume = await ctx.server.api('POST', `/v1/sessions/${s.id}/resume`);
      assert.equal(resume.status, 200, resume.text);
    }
    await page.waitForSelector('#conn-state[data-state=connected]', { timeout: 10000 });
    await page.close();
  });

  test('a dropped connection reconnects by itself', async () => {
    // The viewer reaches cabind through a TCP relay that the test can cut, as a network would.
    const relay = await tcpRelay(ctx.server.port);
    try {
      const url = s.live_view_url.replace(ctx.server.base, `http://127.0.0.1:${relay.port}`);
      const page = await openViewer(url);
      assert.equal(relay.websockets(), 1);
      relay.cut();
      await page.waitForSelector('#conn-state[data-state=reconnecting]');
      await page.waitForSelector('#conn-state[data-state=connected]', { timeout: 20000 });
      assert.equal(relay.websockets(), 2, 'a second connection');
      const inBox = await screenPoint(0.5, 0.25);
      await waitFor(async () => near(await canvasPixel(page, inBox), BOX),
                    { what: 'the screen again after reconnecting' });
      await page.close();
    } finally {
      relay.close();
    }
  });

  test('expired, other-session and ended links show what is wrong', async () => {
    const { base } = ctx.server;
    // Expired: minted for a second, and used after.
    const short = await mint('view', 1);
    await waitFor(async () => (await fetch(`${base}/v1/sessions/${s.id}/live/status?token=${short}`))
      .status === 401, { what: 'the short token to expire', timeoutMs: 5000, intervalMs: 200 });
    const page = await browser.newPage();
    let res = await page.goto(liveUrl(short));
    assert.equal(res.status(), 401);
    assert.equal(await page.textContent('#error-title'), 'This link has expired.');
    assert.equal(await page.textContent('#error-code'), 'token_expired');

    // Another session's control link does not open this one.
    const other = await ctx.server.createSession({ resolution: { width: 640, height: 480 } });
    const otherControl = (await ctx.server.api('POST', `/v1/sessions/${other.id}/tokens`,
                                               { scope: 'control', ttl_s: 600 })).json.token;
    res = await page.goto(liveUrl(otherControl));
    assert.equal(res.status(), 401);
    assert.match(await page.textContent('#error-message'), /another session/);

    // A viewer whose session ends says so, and stops.
    const viewer = await openViewer(other.live_view_url);
    await ctx.server.deleteSession(other.id);
    // Ending while the sandbox is being removed, then ended, with the reason.
    await viewer.waitForSelector('#conn-state[data-state=ended]', { timeout: 15000 });
    assert.equal(await viewer.textContent('#conn-state'), 'Ended');
    assert.match(await viewer.textContent('#notice-detail'), /^Reason: deleted\b/);
    assert.equal(await viewer.isEnabled('#screenshot'), false);
    await viewer.close();
    await page.close();
  });
});
