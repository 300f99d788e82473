// The preview attack matrix: every row is refused with the right status and reaches nothing in
// the sandbox (the app counts every request it gets). Then what keeps a preview's page away from
// cabind's origin (path-based, in real Chromium) and from its sibling previews (host-based).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { chromium } from 'playwright-core';

import { rawHttp, useCabind, waitFor, wsOpen } from './helpers.mjs';
import { DOMAIN, exec, hostRequest, openPreview, startApps } from './preview_helpers.mjs';

const ctx = useCabind({ args: ['--preview-domain', DOMAIN] });

test('attack matrix: refused with the right status, nothing forwarded', async () => {
  const server = ctx.server;
  const { session } = await startApps(server);
  const other = await server.createSession({});
  const pv = await openPreview(server, session.id, 8000, 'path');
  const hostPv = await openPreview(server, session.id, 8000, 'host');
  // Creating the host preview replaced the path one of the same port: open it again.
  const pv2 = await openPreview(server, session.id, 8000, 'path');
  const target = `${pv2.prefix}/echo`;
  const h = server.hostPort;
  const mint = async (id, scope, ttl_s = 600) => {
    const r = await server.api('POST', `/v1/sessions/${id}/tokens`, { scope, ttl_s });
    assert.equal(r.status, 201, r.text);
    return r.json.token;
  };
  const withCookie = (token) => `GET ${target} HTTP/1.1\r\nHost: ${h}\r\nCookie: cabin_preview=${token}\r\n\r\n`;
  const count = async () => {
    const r = await rawHttp(server.port, `GET ${pv2.prefix}/__count HTTP/1.1\r\nHost: ${h}\r\nCookie: ${pv2.cookie}\r\nConnection: close\r\n\r\n`);
    assert.equal(r.status, 200, r.text);
    return r.json.seen;
  };
  assert.equal((await rawHttp(server.port, withCookie(pv2.cookie.split('=')[1]))).status, 200,
               'the baseline request passes');
  // Preview tokens are minted for a port's live preview only.
  const none = await server.api('POST', `/v1/sessions/${session.id}/tokens`, { scope: 'preview:8003' });
  assert.equal(none.status, 404, none.text);
  assert.equal(none.json.error.code, 'preview_not_found');
  for (const [id, port] of [[other.id, 8000], [session.id, 8001]]) {
    assert.equal((await server.api('POST', `/v1/sessions/${id}/previews`, { port })).status, 201);
  }
  // A deleted preview's token, replayed on a new preview of the same port.
  const deleted = await openPreview(server, session.id, 8002, 'path');
  assert.equal((await server.api('DELETE', `/v1/sessions/${session.id}/previews/${deleted.id}`)).status, 200);
  const successor = await openPreview(server, session.id, 8002, 'path');

  const expiring = await mint(session.id, 'preview:8000', 1);
  await waitFor(async () => (await rawHttp(server.port, withCookie(expiring))).status === 401,
                { what: 'the 1 s token to expire', timeoutMs: 5000, intervalMs: 200 });
  const before = await count();
  const valid = pv2.cookie.split('=')[1];
  const flipped = valid.slice(0, -1) + (valid.endsWith('A') ? 'B' : 'A');
  const rows = [
    ['no token', `GET ${target} HTTP/1.1\r\nHost: ${h}\r\n\r\n`, 401, 'unauthenticated'],
    ['expired', withCookie(expiring), 401, 'token_expired'],
    ['tampered signature', withCookie(flipped), 401, 'invalid_token'],
    ['another session', withCookie(await mint(other.id, 'preview:8000')), 401, 'invalid_token'],
    ['another port', withCookie(await mint(session.id, 'preview:8001')), 403, 'token_scope'],
    ['a replaced preview\'s token', withCookie(pv.cookie.split('=')[1]), 401, 'token_revoked'],
    ['a replaced host preview\'s cookie on its host',
     `GET /echo HTTP/1.1\r\nHost: ${hostPv.host}\r\nCookie: ${hostPv.cookie}\r\n\r\n`, 401, 'token_revoked'],
    ['a deleted preview\'s token on its successor',
     `GET ${successor.prefix}/echo HTTP/1.1\r\nHost: ${h}\r\nCookie: ${deleted.cookie}\r\n\r\n`, 401, 'token_revoked'],
    ['a deleted preview\'s token in its successor\'s URL',
     `GET ${successor.prefix}/?cabin_token=${deleted.token} HTTP/1.1\r\nHost: ${h}\r\n\r\n`, 401, 'token_revoked'],
    ['another scope (view)', withCookie(await mint(session.id, 'view')), 403, 'token_scope'],
    ['another scope (control)', withCookie(await mint(session.id, 'control')), 403, 'token_scope'],
    ['token in the URL of another session',
     `GET ${target}?cabin_token=${await mint(other.id, 'preview:8000')} HTTP/1.1\r\nHost: ${h}\r\n\r\n`,
     401, 'invalid_token'],
    ['Host: evil.example', `GET ${target} HTTP/1.1\r\nHost: evil.example\r\nCookie: ${pv2.cookie}\r\n\r\n`,
     421, 'unknown_host'],
    ['Host: evil.example on a host preview',
     `GET /echo HTTP/1.1\r\nHost: p-8000-${session.id.slice(4)}.evil.example\r\nCookie: ${hostPv.cookie}\r\n\r\n`,
     404, null],
    ['absolute-form target',
     `GET http://127.0.0.1:8000/echo HTTP/1.1\r\nHost: ${hostPv.host}\r\nCookie: ${hostPv.cookie}\r\n\r\n`,
     400, 'bad_target'],
    ['absolute-form target to the preview host',
     `GET http://${hostPv.host}/echo HTTP/1.1\r\nHost: ${hostPv.host}\r\nCookie: ${hostPv.cookie}\r\n\r\n`,
     400, 'bad_target'],
    ['Content-Length and Transfer-Encoding',
     `POST ${target} HTTP/1.1\r\nHost: ${h}\r\nCookie: ${pv2.cookie}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n`,
     400, 'bad_request'],
    ['two different Content-Lengths',
     `POST ${target} HTTP/1.1\r\nHost: ${h}\r\nCookie: ${pv2.cookie}\r\nContent-Length: 5\r\nContent-Length: 30\r\n\r\nhello`,
     400, 'bad_request'],
    ['Transfer-Encoding other than chunked',
     `POST ${target} HTTP/1.1\r\nHost: ${h}\r\nCookie: ${pv2.cookie}\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n`,
     400, 'bad_transfer_encoding'],
    ['chunked, then identity',
     `POST ${target} HTTP/1.1\r\nHost: ${h}\r\nCookie: ${pv2.cookie}\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n`,
     400, 'bad_transfer_encoding'],
    ['dot segments', `GET ${pv2.prefix}/../../v1/info HTTP/1.1\r\nHost: ${h}\r\nCookie: ${pv2.cookie}\r\n\r\n`, 400, 'bad_target'],
    ['encoded dot segments', `GET ${pv2.prefix}/%2e%2E/x HTTP/1.1\r\nHost: ${h}\r\nCookie: ${pv2.cookie}\r\n\r\n`, 400, 'bad_target'],
    ['encoded slash', `GET ${pv2.prefix}/a%2f..%2fb HTTP/1.1\r\nHost: ${h}\r\nCookie: ${pv2.cookie}\r\n\r\n`, 400, 'bad_target'],
    ['backslash', `GET ${pv2.prefix}/..\\..\\x HTTP/1.1\r\nHost: ${h}\r\nCookie: ${pv2.cookie}\r\n\r\n`, 400, null],
    ['traversal before the id', `GET /preview/../v1/info HTTP/1.1\r\nHost: ${h}\r\n\r\n`, 400, 'bad_target'],
    ['oversized headers', `GET ${target} HTTP/1.1\r\nHost: ${h}\r\nCookie: ${pv2.cookie}\r\nX-Big: ${'a'.repeat(20000)}\r\n\r\n`, 431, 'headers_too_large'],
    ['oversized URL', `GET ${pv2.prefix}/${'a'.repeat(20000)} HTTP/1.1\r\nHost: ${h}\r\n\r\n`, 414, 'uri_too_long'],
    ['long URL over the preview limit', `GET ${pv2.prefix}/${'a'.repeat(9000)} HTTP/1.1\r\nHost: ${h}\r\nCookie: ${pv2.cookie}\r\n\r\n`, 400, 'bad_target'],
  ];
  for (const [name, head, status, code] of rows) {
    const r = await rawHttp(server.port, head);
    assert.equal(r.status, status, `${name}: ${r.status} ${r.text}`);
    if (code) assert.equal(r.json?.error?.code, code, `${name}: ${r.text}`);
  }
  // Host-based: a preview host only serves under the configured domain and for a live grant.
  const wrongPort = await hostRequest(server.port, `p-8999-${session.id.slice(4)}.${DOMAIN}`, '/echo',
                                      { cookie: hostPv.cookie });
  assert.equal(wrongPort.status, 404);

  // Revoked, then replayed: the cookie and the URL's token both stop working.
  const rv = await server.api('POST', `/v1/sessions/${session.id}/tokens/revoke`);
  assert.equal(rv.status, 200);
  for (const head of [withCookie(valid), `GET ${target}?cabin_token=${pv2.token} HTTP/1.1\r\nHost: ${h}\r\n\r\n`]) {
    const r = await rawHttp(server.port, head);
    assert.equal(r.status, 401, r.text);
    assert.equal(r.json.error.code, 'token_revoked');
  }

  // A signing key removed: its tokens stop verifying.
  const keysDir = path.join(server.stateDir, 'keys');
  const fresh = await openPreview(server, session.id, 8000, 'path');
  const oldKey = fs.readdirSync(keysDir).find((f) => /^token-.*\.key$/.test(f));
  fs.writeFileSync(path.join(keysDir, 'token-k5000000000.key'), randomBytes(32).toString('hex'));
  fs.rmSync(path.join(keysDir, oldKey));
  process.kill(server.pid, 'SIGHUP');
  const removed = await waitFor(async () => {
    const r = await rawHttp(server.port, `GET ${fresh.prefix}/__count HTTP/1.1\r\nHost: ${h}\r\nCookie: ${fresh.cookie}\r\n\r\n`);
    return r.status === 401 ? r : null;
  }, { what: 'the removed key to stop verifying' });
  assert.equal(removed.json.error.code, 'invalid_token');

  const again = await openPreview(server, session.id, 8000, 'path');
  const r = await rawHttp(server.port, `GET ${again.prefix}/__count HTTP/1.1\r\nHost: ${h}\r\nCookie: ${again.cookie}\r\n\r\n`);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.seen, before, 'a refused request reached the app');
  await server.deleteSession(other.id);
  await server.deleteSession(session.id);
});

let apps;  // a session of its own for the tests below
async function setup() {
  apps ??= await startApps(ctx.server);
  return apps;
}

test('path-based: no service worker over the console, no reach into its storage (Chromium)', async () => {
  const server = ctx.server;
  const { session } = await setup();
  const pv = await openPreview(server, session.id, 8000, 'path');
  const h = server.hostPort;
  const cookie = `cabin_preview=${pv.token}`;
  const get = (p, extra = '') => rawHttp(server.port,
    `GET ${pv.prefix}${p} HTTP/1.1\r\nHost: ${h}\r\nCookie: ${cookie}\r\n${extra}\r\n`);
  // The worker script's own request is refused; fetched as a plain file it loses the header that
  // would widen a worker's scope, and every answer is sandboxed.
  const asWorker = await get('/sw.js', 'Service-Worker: script\r\n');
  assert.equal(asWorker.status, 403, asWorker.text);
  assert.equal(asWorker.json.error.code, 'service_worker_refused');
  assert.ok(asWorker.json.error.message);
  const plain = await get('/sw.js');
  assert.equal(plain.status, 200, plain.text);
  assert.equal(plain.headers['service-worker-allowed'], undefined);
  assert.match(plain.headers['content-security-policy'], /^sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads$/);

  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await browser.newPage();
    // What the console keeps on cabind's origin, in this tab.
    await page.goto(`${server.base}/healthz`);
    await page.evaluate(() => {
      localStorage.setItem('console_secret', 'stand-in-for-the-api-key');
      sessionStorage.setItem('console_secret', 'stand-in-for-the-api-key');
      document.cookie = 'console_secret=stand-in-for-the-api-key; path=/';
    });
    await page.goto(`${server.base}${pv.prefix}/?cabin_token=${pv.token}`);
    assert.equal(new URL(page.url()).pathname, `${pv.prefix}/`);
    await page.goto(`${server.base}${pv.prefix}/grab`);
    await page.waitForFunction(() => document.getElementById('result')?.textContent, null, { timeout: 10000 });
    const got = JSON.parse(await page.textContent('#result'));
    for (const name of ['register', 'localStorage', 'sessionStorage', 'cookie']) {
      assert.match(got[name], /^error: SecurityError$/, `${name}: ${JSON.stringify(got)}`);
    }
    assert.equal(got.origin, 'ok: null', 'the page runs in an opaque origin');
    // Back on the console's origin: nothing controls it, and what it kept is still there.
    await page.goto(`${server.base}/healthz`);
    const after = await page.evaluate(async () => ({
      workers: (await navigator.serviceWorker.getRegistrations()).map((r) => r.scope),
      kept: localStorage.getItem('console_secret'),
    }));
    assert.deepEqual(after, { workers: [], kept: 'stand-in-for-the-api-key' });
  } finally {
    await browser.close();
  }
});

test('host-based: other origins cannot post or open WebSockets, tossed cookies do not lock out, no Authorization, no open redirect', async () => {
  const server = ctx.server;
  const { session } = await setup();
  const pv = await openPreview(server, session.id, 8000, 'host');
  const sibling = await openPreview(server, session.id, 8001, 'host');
  const hostPort = `${pv.host}:${server.port}`;
  const own = `http://${hostPort}`;
  const other = `http://${sibling.host}:${server.port}`;
  const req = (head, body = '') => rawHttp(server.port,
    `${head}\r\nHost: ${hostPort}\r\n${body ? `Content-Length: ${body.length}\r\n` : ''}\r\n${body}`);
  const count = async () => {
    const r = await req(`GET /__count HTTP/1.1\r\nCookie: ${pv.cookie}`);
    assert.equal(r.status, 200, r.text);
    return r.json.seen;
  };
  const before = await count();
  const upgrade = 'Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==';
  const refused = [
    ['a WebSocket from a sibling preview', `GET /ws HTTP/1.1\r\nCookie: ${pv.cookie}\r\nOrigin: ${other}\r\n${upgrade}`],
    ['a POST from a sibling preview', `POST /echo HTTP/1.1\r\nCookie: ${pv.cookie}\r\nOrigin: ${other}`, 'hi'],
    ['a DELETE from another site', `DELETE /echo HTTP/1.1\r\nCookie: ${pv.cookie}\r\nOrigin: http://evil.example`],
    ['a POST from an opaque origin', `POST /echo HTTP/1.1\r\nCookie: ${pv.cookie}\r\nOrigin: null`, 'hi'],
    ['a POST from the same host over https', `POST /echo HTTP/1.1\r\nCookie: ${pv.cookie}\r\nOrigin: https://${hostPort}`, 'hi'],
  ];
  for (const [name, head, body] of refused) {
    const r = await req(head, body);
    assert.equal(r.status, 403, `${name}: ${r.status} ${r.text}`);
    assert.equal(r.json?.error?.code, 'cross_origin', `${name}: ${r.text}`);
  }
  await assert.rejects(
    wsOpen(`ws://127.0.0.1:${server.port}/ws`, { headers: { host: hostPort, origin: other, cookie: pv.cookie } }),
    (err) => err.status === 403 && err.json?.error?.code === 'cross_origin');
  assert.equal(await count(), before, 'a refused request reached the app');

  // Its own origin, or no Origin at all (a client that is not a browser), passes; so does a
  // cross-origin GET, which changes nothing.
  for (const origin of [`\r\nOrigin: ${own}`, '']) {
    const r = await req(`POST /echo HTTP/1.1\r\nCookie: ${pv.cookie}${origin}`, 'hi');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.body, 'hi');
  }
  assert.equal((await req(`GET /echo HTTP/1.1\r\nCookie: ${pv.cookie}\r\nOrigin: ${other}`)).status, 200);
  const ws = await wsOpen(`ws://127.0.0.1:${server.port}/ws`, { headers: { host: hostPort, origin: own, cookie: pv.cookie } });
  const reply = new Promise((r) => ws.once('message', (d) => r(d.toString())));
  ws.send('same origin');
  assert.equal(await reply, 'echo:same origin');
  ws.close();

  // Cookies a sibling planted under the preview domain, beside the real one, in either order.
  const good = pv.cookie.split('=')[1];
  for (const planted of ['junk', sibling.cookie.split('=')[1]]) {
    for (const cookies of [`cabin_preview=${good}; cabin_preview=${planted}`,
                           `cabin_preview=${planted}; cabin_preview=${good}`]) {
      const r = await req(`GET /echo HTTP/1.1\r\nCookie: ${cookies}; app=1`);
      assert.equal(r.status, 200, `${cookies}: ${r.text}`);
      assert.equal(Object.fromEntries(r.json.headers).cookie, 'app=1');
    }
  }
  // The app cannot plant them: Domain is taken off its cookies, Cabin's own are dropped.
  const tossed = await hostRequest(server.port, pv.host, '/toss-cookies', { cookie: pv.cookie });
  assert.deepEqual(tossed.headers['set-cookie'], ['theme=dark; Path=/']);

  // The API key a client sends by habit does not reach the app, in either mode.
  const withKey = await req(`GET /echo HTTP/1.1\r\nCookie: ${pv.cookie}\r\nAuthorization: Bearer ${server.key}`);
  assert.equal(withKey.status, 200, withKey.text);
  assert.ok(!withKey.text.includes(server.key), withKey.text);
  assert.equal(Object.fromEntries(withKey.json.headers).authorization, undefined);
  const pathPv = await openPreview(server, session.id, 8000, 'path');
  const byPath = await rawHttp(server.port, `GET ${pathPv.prefix}/echo HTTP/1.1\r\nHost: ${server.hostPort}\r\nCookie: ${pathPv.cookie}\r\nAuthorization: Bearer ${server.key}\r\n\r\n`);
  assert.equal(byPath.status, 200, byPath.text);
  assert.ok(!byPath.text.includes(server.key), byPath.text);

  // The token's redirect stays on the preview's own origin.
  const fresh = await openPreview(server, session.id, 8000, 'host');
  const redirect = await req(`GET //evil.example/?cabin_token=${fresh.token} HTTP/1.1`);
  assert.equal(redirect.status, 302, redirect.text);
  assert.equal(redirect.headers.location, '/evil.example/');
  assert.match(redirect.headers['set-cookie'], /^cabin_preview=/);
});

test('Cabin\'s own ports in the sandbox have no preview: DevTools, VNC, the egress proxy', async () => {
  const server = ctx.server;
  const s = await server.createSession({});
  // What listens in a fresh sandbox is Cabin's own: the browser's DevTools port (a random one),
  // the VNC server and the egress proxy's listener.
  const listening = await exec(server, s.id, ['sh', '-c', "awk 'NR > 1 && $4 == \"0A\" { print $2 }' /proc/net/tcp"]);
  const ports = new Set(listening.stdout.trim().split('\n').map((a) => parseInt(a.split(':')[1], 16)));
  assert.ok([...ports].some((p) => p !== 5900 && p !== 3128), `no DevTools port among ${[...ports]}`);
  for (const port of [...ports, 5900, 3128]) {
    const r = await server.api('POST', `/v1/sessions/${s.id}/previews`, { port });
    assert.equal(r.status, 400, `port ${port}: ${r.text}`);
    assert.match(r.json.error.message, /preview a port your own app listens on/);
  }
  const list = await server.api('GET', `/v1/sessions/${s.id}/previews`);
  assert.deepEqual(list.json.previews, []);
});
