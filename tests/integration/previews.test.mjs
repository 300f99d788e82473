// Port previews end to end: a real app and a static file server started inside a sandbox through
// exec, reached through both routing modes with real HTTP clients and from real Chromium; HTTP/1.1
// streamed both ways (keep-alive, chunked, 100 MB down, 64 MB up, server-sent events), WebSocket
// upgrades, closing on delete, and a time limit on the app's answer.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { test } from 'node:test';

import { chromium } from 'playwright-core';

import { useCabind, waitFor, withDeadline, wsOpen } from './helpers.mjs';
import { DOMAIN, hostRequest, openPreview, startApps } from './preview_helpers.mjs';

const ANSWER_TIMEOUT_S = 3;
const ctx = useCabind({
  args: ['--preview-domain', DOMAIN, '--preview-answer-timeout-s', String(ANSWER_TIMEOUT_S)],
});

let apps;  // { session, app: 8000, files: 8001 }
async function setup() {
  apps ??= await startApps(ctx.server);
  return apps;
}

test('create, list and delete previews; bad requests are 400', async () => {
  const { session } = await setup();
  const p = await ctx.server.api('POST', `/v1/sessions/${session.id}/previews`,
                                 { port: 8000, ttl_s: 600 });
  assert.equal(p.status, 201, p.text);
  assert.match(p.json.id, /^prv_[a-z0-9]{20}$/);
  assert.equal(p.json.port, 8000);
  assert.equal(new URL(p.json.path_url).pathname, `/preview/${p.json.id}/`);
  assert.equal(new URL(p.json.host_url).hostname,
               `p-8000-${session.id.slice(4)}.${DOMAIN}`);
  assert.equal(p.json.url, p.json.host_url);
  assert.ok(new URL(p.json.path_url).searchParams.get('cabin_token'));
  const left = Date.parse(p.json.expires_at) - Date.now();
  assert.ok(left > 590e3 && left <= 601e3, p.json.expires_at);

  const list = await ctx.server.api('GET', `/v1/sessions/${session.id}/previews`);
  assert.equal(list.status, 200);
  assert.ok(list.json.previews.some((x) => x.id === p.json.id));
  for (const body of [{}, { port: 0 }, { port: 65536 }, { port: '80' }, { port: 80, ttl_s: 0 },
                      { port: 80, ttl_s: 10 ** 9 }, { port: 80, other: 1 }]) {
    const bad = await ctx.server.api('POST', `/v1/sessions/${session.id}/previews`, body);
    assert.equal(bad.status, 400, `${JSON.stringify(body)} -> ${bad.text}`);
  }
  const noKey = await ctx.server.api('GET', `/v1/sessions/${session.id}/previews`, undefined,
                                     { key: null });
  assert.equal(noKey.status, 401);
  // A token minted for the port comes with the preview's URLs, holding that token.
  const minted = await ctx.server.api('POST', `/v1/sessions/${session.id}/tokens`,
                                      { scope: 'preview:8000' });
  assert.equal(minted.status, 201, minted.text);
  assert.equal(minted.json.preview_id, p.json.id);
  assert.equal(minted.json.url, minted.json.host_url);
  assert.equal(new URL(minted.json.path_url).pathname, `/preview/${p.json.id}/`);
  assert.equal(new URL(minted.json.path_url).searchParams.get('cabin_token'), minted.json.token);
  const opened = await fetch(minted.json.path_url, { redirect: 'manual' });
  assert.equal(opened.status, 302, 'its token is taken, and exchanged for a cookie');
  const del = await ctx.server.api('DELETE', `/v1/sessions/${session.id}/previews/${p.json.id}`);
  assert.equal(del.status, 200, del.text);
  const again = await ctx.server.api('DELETE', `/v1/sessions/${session.id}/previews/${p.json.id}`);
  assert.equal(again.status, 404);
  const gone = await fetch(p.json.path_url, { redirect: 'manual' });
  assert.equal(gone.status, 404);
});

test('path-based: token to cookie and redirect, then a faithful, streaming proxy', async () => {
  const { session } = await setup();
  const pv = await openPreview(ctx.server, session.id, 8000, 'path');
  const { base, cookie, prefix, first } = pv;
  // The first answer: a redirect without the token and an HttpOnly, SameSite cookie on the prefix.
  assert.equal(first.status, 302);
  assert.equal(first.headers.get('location'), `${prefix}/`);
  const setCookie = first.headers.get('set-cookie');
  assert.match(setCookie, /^cabin_preview=[^;]+; Path=\/preview\/prv_[a-z0-9]{20}\/; Max-Age=\d+; HttpOnly; SameSite=Lax$/);

  const get = (p, init = {}) => fetch(base + prefix + p, {
    redirect: 'manual', ...init, headers: { cookie: `${cookie}; app_cookie=kept`, ...init.headers },
  });
  const echo = await (await get('/echo?a=1&b=2')).json();
  assert.equal(echo.path, '/echo?a=1&b=2');
  const h = Object.fromEntries(echo.headers);
  assert.equal(h.host, '127.0.0.1:8000');
  assert.equal(h.cookie, 'app_cookie=kept');
  assert.equal(h['x-forwarded-prefix'], prefix);
  assert.equal(h['x-forwarded-proto'], 'http');
  assert.equal(h['x-forwarded-host'], ctx.server.hostPort);
  assert.equal(h['x-forwarded-for'], '127.0.0.1');
  assert.ok(!JSON.stringify(echo).includes(cookie.split('=')[1]), 'the token reaches the app');

  const redirect = await get('/redirect');
  assert.equal(redirect.status, 302);
  assert.equal(redirect.headers.get('location'), `${prefix}/echo?from=redirect`);
  const cookies = (await get('/set-cookie')).headers.getSetCookie();
  assert.deepEqual(cookies, [`app=1; Path=${prefix}/; HttpOnly`]);
  assert.equal(await (await get('/chunked')).text(), 'hello chunked world');
  const head = await get('/echo', { method: 'HEAD' });
  assert.equal(head.status, 200);
  assert.equal(await head.text(), '');

  // Keep-alive: two requests, one connection.
  const two = await twoOnOneConnection(ctx.server.port, `${prefix}/echo`, cookie);
  assert.deepEqual(two, [200, 200]);

  // 100 MB down and 64 MB up (with a length, and chunked) pass without being held whole.
  const hwm0 = highWater(ctx.server.pid);
  const big = await get(`/big/${100 << 20}`);
  assert.equal(big.status, 200);
  let n = 0;
  const t0 = Date.now();
  for await (const chunk of big.body) n += chunk.length;
  assert.equal(n, 100 << 20);
  const mbps = (n / (1 << 20)) / ((Date.now() - t0) / 1000);
  const upload = Buffer.alloc(64 << 20, 7);
  const digest = createHash('sha256').update(upload).digest('hex');
  const up1 = await (await get('/upload', { method: 'POST', body: upload })).json();
  assert.deepEqual(up1, { bytes: upload.length, sha256: digest });
  const stream = new ReadableStream({
    start(c) {
      for (let off = 0; off < upload.length; off += 1 << 20) c.enqueue(upload.subarray(off, off + (1 << 20)));
      c.close();
    },
  });
  const up2 = await (await get('/upload', { method: 'POST', body: stream, duplex: 'half' })).json();
  assert.deepEqual(up2, { bytes: upload.length, sha256: digest });
  const grew = highWater(ctx.server.pid) - hwm0;
  assert.ok(grew < 48 << 20, `cabind's peak memory grew by ${grew >> 20} MiB`);
  console.log(`# preview download ${mbps.toFixed(0)} MiB/s; cabind peak memory +${grew >> 20} MiB`);

  // The static file server next to it, on its own preview.
  const files = await openPreview(ctx.server, session.id, 8001, 'path');
  const file = await fetch(files.base + files.prefix + '/hello.txt', { headers: { cookie: files.cookie } });
  assert.equal(await file.text(), 'hello from the sandbox\n');
  const listing = await fetch(files.base + files.prefix + '/', { headers: { cookie: files.cookie } });
  assert.match(await listing.text(), /hello\.txt/);
  // One preview's cookie does not open the other.
  const crossed = await fetch(files.base + files.prefix + '/hello.txt', { headers: { cookie } });
  assert.equal(crossed.status, 403);
});

test('server-sent events and WebSockets flow, and close when the preview is deleted', async () => {
  const { session } = await setup();
  const pv = await openPreview(ctx.server, session.id, 8000, 'path');
  const sse = await fetch(pv.base + pv.prefix + '/sse', { headers: { cookie: pv.cookie } });
  assert.equal(sse.headers.get('content-type'), 'text/event-stream');
  const reader = sse.body.getReader();
  let text = '';
  while (!text.includes('tick 2')) {
    const { value, done } = await withDeadline(reader.read(), 5000, 'an event');
    assert.ok(!done, 'the event stream ended early');
    text += Buffer.from(value).toString();
  }
  // Events arrive one by one while the stream stays open: nothing is held back.
  assert.match(text, /data: tick 0\n\ndata: tick 1\n\ndata: tick 2\n\n/);

  const ws = await wsOpen(`ws://${ctx.server.hostPort}${pv.prefix}/ws`, { headers: { cookie: pv.cookie } });
  const reply = new Promise((r) => ws.once('message', (d) => r(d.toString())));
  ws.send('hi');
  assert.equal(await withDeadline(reply, 5000, 'the echo'), 'echo:hi');
  const big = Buffer.alloc(1 << 20, 3);
  const bigReply = new Promise((r) => ws.once('message', (d) => r(d)));
  ws.send(big);
  assert.ok(Buffer.compare(await withDeadline(bigReply, 10000, 'a 1 MiB echo'), big) === 0);
  const wsClosed = new Promise((r) => ws.once('close', r));

  const del = await ctx.server.api('DELETE', `/v1/sessions/${session.id}/previews/${pv.id}`);
  assert.equal(del.status, 200);
  assert.ok(del.json.closed_connections >= 2, del.text);
  await withDeadline(wsClosed, 5000, 'the WebSocket to close');
  await withDeadline((async () => {
    for (;;) {
      const { done } = await reader.read().catch(() => ({ done: true }));
      if (done) return;
    }
  })(), 5000, 'the event stream to close');
  const after = await fetch(pv.base + pv.prefix + '/echo', { headers: { cookie: pv.cookie } });
  assert.equal(after.status, 404);
});

test('a preview expires: open connections close and requests are refused', async () => {
  const { session } = await setup();
  const pv = await openPreview(ctx.server, session.id, 8000, 'path', 3);
  const ws = await wsOpen(`ws://${ctx.server.hostPort}${pv.prefix}/ws`, { headers: { cookie: pv.cookie } });
  const closed = new Promise((r) => ws.once('close', r));
  await withDeadline(closed, 8000, 'the WebSocket to close at expiry');
  const after = await fetch(pv.base + pv.prefix + '/echo', { headers: { cookie: pv.cookie } });
  assert.ok([401, 404].includes(after.status), `${after.status}`);
});

test('a client whose request body stops arriving is cut off', async () => {
  const { session } = await setup();
  const pv = await openPreview(ctx.server, session.id, 8000, 'path');
  const socket = net.connect(ctx.server.port, '127.0.0.1');
  await once(socket, 'connect');
  socket.on('data', () => {});
  const closed = new Promise((r) => socket.once('close', r));
  const t0 = Date.now();
  // A body of 1000 bytes promised, 10 sent, then nothing.
  socket.write(`POST ${pv.prefix}/echo HTTP/1.1\r\nHost: ${ctx.server.hostPort}\r\n` +
               `Cookie: ${pv.cookie}\r\nContent-Length: 1000\r\n\r\n0123456789`);
  await withDeadline(closed, (ANSWER_TIMEOUT_S + 8) * 1000, 'cabind to close the stalled upload');
  const waited = (Date.now() - t0) / 1000;
  assert.ok(waited >= ANSWER_TIMEOUT_S - 0.5, `closed after ${waited} s`);
  // The server goes on serving.
  const ok = await fetch(pv.base + pv.prefix + '/echo', { headers: { cookie: pv.cookie } });
  assert.equal(ok.status, 200);
});

test('an app that does not start answering in time: 504, and the client keeps its connection', async () => {
  const { session } = await setup();
  const pv = await openPreview(ctx.server, session.id, 8000, 'path');
  const socket = net.connect(ctx.server.port, '127.0.0.1');
  await once(socket, 'connect');
  let got = '';
  socket.on('data', (d) => { got += d; });
  const ask = (p) => socket.write(`GET ${pv.prefix}${p} HTTP/1.1\r\nHost: ${ctx.server.hostPort}\r\nCookie: ${pv.cookie}\r\n\r\n`);
  const t0 = Date.now();
  ask('/hang');
  await waitFor(() => /\r\n\r\n\{.*\}\}\n$/s.test(got), { what: 'the 504', timeoutMs: 20000, intervalMs: 50 });
  const waited = (Date.now() - t0) / 1000;
  assert.match(got, /^HTTP\/1\.1 504 /, got);
  assert.match(got, /"code":"preview_timeout"/);
  assert.ok(waited >= ANSWER_TIMEOUT_S - 0.5 && waited < ANSWER_TIMEOUT_S + 8, `answered after ${waited} s`);
  got = '';
  ask('/echo');  // the same client connection, a fresh one to the app
  await waitFor(() => /"method": ?"GET"/.test(got), { what: 'the next answer', timeoutMs: 10000, intervalMs: 50 });
  assert.match(got, /^HTTP\/1\.1 200 /, got);
  socket.destroy();
});

test('host-based: its own origin, checked Host, from a real HTTP client and Chromium', async () => {
  const { session } = await setup();
  const pv = await openPreview(ctx.server, session.id, 8000, 'host');
  assert.equal(pv.first.status, 302);
  assert.equal(pv.first.headers.location, '/');
  assert.match(pv.first.headers['set-cookie'][0], /^cabin_preview=[^;]+; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Lax$/);
  const echo = await hostRequest(ctx.server.port, pv.host, '/echo', { cookie: pv.cookie });
  assert.equal(echo.status, 200);
  const h = Object.fromEntries(JSON.parse(echo.body).headers);
  assert.equal(h['x-forwarded-host'], `${pv.host}:${ctx.server.port}`);
  assert.equal(h['x-forwarded-prefix'], undefined);
  // Cookies and redirects need no rewriting on their own origin.
  const set = await hostRequest(ctx.server.port, pv.host, '/set-cookie', { cookie: pv.cookie });
  assert.deepEqual(set.headers['set-cookie'], ['app=1; Path=/; HttpOnly']);

  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-first-run', '--disable-background-networking', '--disable-component-update',
           '--disable-sync', `--host-resolver-rules=MAP *.${DOMAIN} 127.0.0.1`],
  });
  try {
    const page = await browser.newPage();
    const created = await ctx.server.api('POST', `/v1/sessions/${session.id}/previews`, { port: 8000 });
    await page.goto(created.json.host_url);
    assert.equal(new URL(page.url()).search, '', 'the token left the address bar');
    assert.equal(new URL(page.url()).hostname, pv.host);
    const seen = JSON.parse(await page.textContent('body'));
    assert.equal(seen.path, '/');
    await page.goto(`http://${pv.host}:${ctx.server.port}/set-cookie`);
    // Both the preview cookie and the app's are HttpOnly: out of reach of scripts.
    assert.equal(await page.evaluate(() => document.cookie), '');
    const echoed = await page.evaluate(async () => {
      const ws = new WebSocket(`ws://${location.host}/ws`);
      await new Promise((r, j) => { ws.onopen = r; ws.onerror = j; });
      const msg = new Promise((r) => { ws.onmessage = (e) => r(e.data); });
      ws.send('from chromium');
      return msg;
    });
    assert.equal(echoed, 'echo:from chromium');
    // Path-based in the same browser: relative links stay under the prefix.
    const p2 = await ctx.server.api('POST', `/v1/sessions/${session.id}/previews`, { port: 8001 });
    await page.goto(p2.json.path_url);
    assert.equal(new URL(page.url()).pathname, `/preview/${p2.json.id}/`);
    assert.equal(new URL(page.url()).search, '');
    await page.click('a[href="hello.txt"]');
    assert.equal((await page.textContent('body')).trim(), 'hello from the sandbox');
  } finally {
    await browser.close();
  }
});

function highWater(pid) {
  const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]) * 1024;
}

function twoOnOneConnection(port, path, cookie) {
  return new Promise((resolve, reject) => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const sockets = new Set();
    const statuses = [];
    const one = () => new Promise((res, rej) => {
      const req = http.get({ port, host: '127.0.0.1', path, agent, headers: { cookie } }, (r) => {
        sockets.add(r.socket);
        r.resume();
        r.on('end', () => res(r.statusCode));
      });
      req.on('error', rej);
    });
    one().then((a) => { statuses.push(a); return one(); }).then((b) => {
      statuses.push(b);
      agent.destroy();
      if (sockets.size !== 1) reject(new Error(`${sockets.size} connections for two requests`));
      else resolve(statuses);
    }, reject);
  });
}
