// The live view's RFB path end to end: a small RFB client written here (Raw encoding only) reads
// the sandbox's screen through GET /v1/sessions/{id}/vnc and through `cabind vnc-forward`;
// control tokens type and click into the page, view tokens cannot; bad tokens and malformed
// RFB are refused.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHmac } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import readline from 'node:readline';
import { after, before, describe, test } from 'node:test';
import zlib from 'node:zlib';

import { chromium } from 'playwright-core';
import WebSocket from 'ws';

import {
  BIN_DIR, startCabind, useCabind, waitFor, withDeadline, wsOpen,
} from './helpers.mjs';
import { RfbClient, wsViewer } from './rfb_client.mjs';

const ctx = useCabind();
const W = 1024;
const H = 700;
const BOX = [0, 200, 100]; // rgb of the page's box

const PAGE = `<!doctype html><title>vnc</title>
<style>body{margin:0;background:#fff} #box{position:absolute;left:60px;top:50px;width:300px;
height:200px;background:rgb(${BOX.join(',')})}</style><div id=box></div>
<script>
window.log = [];
for (const t of ['mousedown','mouseup','keydown']) addEventListener(t, (e) => window.log.push(
  {type: e.type, x: e.screenX, y: e.screenY, button: e.button, key: e.key}), true);
</script>`;

// Capability tokens as cabind signs them (server/auth/tokens.cpp), with its key from the state
// directory, so tests can make expired, other-session and other-scope tokens.
function mintToken(stateDir, sessionId, scope, expiresAt, generation = 0) {
  const dir = path.join(stateDir, 'keys');
  const file = fs.readdirSync(dir).filter((f) => /^token-.+\.key$/.test(f)).sort().pop();
  const kid = file.slice('token-'.length, -'.key'.length);
  const key = fs.readFileSync(path.join(dir, file), 'utf8').trim();
  const payload = `${sessionId}~${scope}~${expiresAt}~${kid}~${generation}`;
  const mac = createHmac('sha256', key).update(`cabin-token-v1\0${payload}`).digest();
  return `${Buffer.from(payload).toString('base64url')}.${mac.toString('base64url')}`;
}
const inAnHour = () => Math.floor(Date.now() / 1000) + 3600;

// PNG (8-bit RGB or RGBA, as the screenshot endpoint writes) to {width, height, rgb(x, y)}.
function decodePng(buf) {
  let at = 8;
  let width, height, channels;
  const idat = [];
  while (at < buf.length) {
    const len = buf.readUInt32BE(at);
    const type = String(buf.subarray(at + 4, at + 8));
    const data = buf.subarray(at + 8, at + 8 + len);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      assert.equal(data[8], 8, 'bit depth');
      channels = { 2: 3, 6: 4 }[data[9]];
    } else if (type === 'IDAT') idat.push(data);
    at += 12 + len;
  }
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const out = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++) {
    const f = raw[y * (stride + 1)];
    for (let i = 0; i < stride; i++) {
      const v = raw[y * (stride + 1) + 1 + i];
      const a = i >= channels ? out[y * stride + i - channels] : 0;
      const b = y > 0 ? out[(y - 1) * stride + i] : 0;
      const c = i >= channels && y > 0 ? out[(y - 1) * stride + i - channels] : 0;
      const p = a + b - c;
      const pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
      const pred = [0, a, b, (a + b) >> 1, pa <= pb && pa <= pc ? a : pb <= pc ? b : c][f];
      out[y * stride + i] = (v + pred) & 0xff;
    }
  }
  return { width, height, rgb: (x, y) => [...out.subarray((y * width + x) * channels, (y * width + x) * channels + 3)] };
}

const near = (a, b, tol = 3) => a.every((v, i) => Math.abs(v - b[i]) <= tol);

// Starts `cabind vnc-forward` for a session on `server` and resolves once it listens, with its
// port, the child and what it wrote to stderr so far.
async function startForward(sessionId, server, extra = []) {
  const child = spawn(path.join(BIN_DIR, 'cabind'),
                      ['vnc-forward', sessionId, '--port', '0', '--server', server.base, ...extra],
                      { env: { ...process.env, CABIN_API_KEY: server.key },
                        stdio: ['ignore', 'pipe', 'pipe'] });
  const stderr = [];
  child.stderr.on('data', (d) => stderr.push(String(d)));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const line = await withDeadline(new Promise((resolve) => {
    readline.createInterface({ input: child.stdout }).once('line', resolve);
  }), 10000, 'vnc-forward to listen');
  const port = Number(/^forwarding 127\.0\.0\.1:(\d+) to session /.exec(line)?.[1]);
  assert.ok(port > 0, line);
  return {
    port,
    stderr: () => stderr.join(''),
    stop: async () => {
      child.kill('SIGTERM');
      await exited;
    },
  };
}

// One JSON request to an https cabind whose certificate is `ca`.
function httpsJson(url, { ca, key, method = 'GET', body } = {}) {
  return new Promise((resolve, reject) => {
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const req = https.request(url, { ca, method, headers, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode,
                                    json: JSON.parse(Buffer.concat(chunks).toString() || 'null') }));
    });
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

// Connects to 127.0.0.1:port as `uid` (a node child) and resolves with what the server sent
// first: the RFB greeting, or '' when the connection was closed without one.
function firstBytesAs(uid, port) {
  const script = `
    const s = require('net').connect(${port}, '127.0.0.1');
    let got = Buffer.alloc(0);
    s.on('data', (d) => { got = Buffer.concat([got, d]); if (got.length >= 12) s.destroy(); });
    s.on('close', () => { process.stdout.write(JSON.stringify(got.subarray(0, 12).toString())); });
    s.on('error', () => {});
    setTimeout(() => s.destroy(), 10000);`;
  return new Promise((resolve, reject) => {
    const opts = uid === process.getuid() ? {} : { uid, gid: uid, cwd: '/' };
    const ch = spawn(process.execPath, ['-e', script], { ...opts, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    ch.stdout.on('data', (d) => { out += d; });
    ch.stderr.on('data', (d) => { err += d; });
    ch.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(err))));
  });
}

describe('live view over RFB', () => {
  let s, browser, page, box;
  const vncUrl = (token) =>
    `ws://${ctx.server.hostPort}/v1/sessions/${s.id}/vnc?token=${encodeURIComponent(token)}`;
  const pageLog = () => page.evaluate(() => window.log.splice(0));

  before(async () => {
    s = await ctx.server.createSession({ resolution: { width: W, height: H } });
    browser = await chromium.connectOverCDP(s.cdp_url);
    page = browser.contexts()[0].pages()[0];
    await page.setContent(PAGE);
    await page.bringToFront();
    // The box's centre on the screen (the browser's toolbar is above the page).
    box = await page.evaluate(() => {
      const top = window.screenY + (window.outerHeight - window.innerHeight);
      const left = window.screenX + (window.outerWidth - window.innerWidth);
      return { x: left + 60 + 150, y: top + 50 + 100, left: left + 60, top: top + 50 };
    });
  });
  after(async () => {
    await browser?.close();
    if (s) await ctx.server.api('DELETE', `/v1/sessions/${s.id}`);
  });

  test('the create response carries a view-only vnc_url; it shows the page', async () => {
    assert.match(s.vnc_url, new RegExp(`^ws://${ctx.server.hostPort}/v1/sessions/${s.id}/vnc\\?token=`));
    const c = await wsViewer(s.vnc_url);
    assert.equal(c.socket.protocol, '', 'no subprotocol asked, none answered');
    assert.equal(c.width, W);
    assert.equal(c.height, H);
    assert.equal(c.name, 'Cabin');
    // The page paints after setContent; wait until the box shows.
    await waitFor(async () => {
      await c.fullFrame();
      return near(c.rgb(box.x, box.y), BOX);
    }, { what: 'the box in the framebuffer', timeoutMs: 10000 });
    assert.deepEqual(c.rgb(box.left + 5, box.top + 5), BOX);
    assert.ok(near(c.rgb(box.left - 10, box.top + 5), [255, 255, 255]), 'white outside the box');
    c.close();
  });

  test('noVNC\'s "binary" subprotocol is answered', async () => {
    const socket = new WebSocket(s.vnc_url, ['binary'], { perMessageDeflate: false });
    await new Promise((resolve, reject) => {
      socket.once('open', resolve);
      socket.once('error', reject);
    });
    assert.equal(socket.protocol, 'binary');
    socket.close();
  });

  test('a control token clicks and types into the page', async () => {
    const c = await wsViewer(vncUrl(mintToken(ctx.server.stateDir, s.id, 'control', inAnHour())));
    await c.fullFrame();
    await pageLog();
    c.pointer(0, box.x, box.y);
    c.pointer(1, box.x, box.y);
    c.pointer(0, box.x, box.y);
    c.key(true, 0x78); // x
    c.key(false, 0x78);
    const seen = [];
    await waitFor(async () => {
      seen.push(...(await pageLog()));
      return seen.some((e) => e.type === 'keydown');
    }, { what: 'the click and the key in the page', timeoutMs: 10000 });
    const down = seen.find((e) => e.type === 'mousedown');
    assert.ok(down, JSON.stringify(seen));
    assert.deepEqual([down.x, down.y, down.button], [box.x, box.y, 0]);
    assert.ok(seen.some((e) => e.type === 'mouseup'));
    assert.equal(seen.find((e) => e.type === 'keydown').key, 'x');
    c.close();
  });

  test('the API key gets control too', async () => {
    const c = await wsViewer(`ws://${ctx.server.hostPort}/v1/sessions/${s.id}/vnc`,
                             { headers: { authorization: `Bearer ${ctx.server.key}` } });
    await pageLog();
    c.key(true, 0x6b); // k
    c.key(false, 0x6b);
    await waitFor(async () => (await pageLog()).some((e) => e.key === 'k'),
                  { what: 'the key from an API-key viewer', timeoutMs: 10000 });
    c.close();
  });

  test('keysyms type what they say, with or without the client\'s Shift', async () => {
    await page.evaluate(() => {
      const t = document.createElement('input');
      t.id = 'typed';
      t.style.cssText = 'position:absolute;left:400px;top:50px;width:300px';
      document.body.append(t);
      t.focus();
    });
    const c = await wsViewer(vncUrl(mintToken(ctx.server.stateDir, s.id, 'control', inAnHour())));
    const SHIFT = 0xffe1;
    const tap = (k) => {
      c.key(true, k);
      c.key(false, k);
    };
    // As noVNC sends IME and synthetic input, and some clients everything: no Shift at all.
    for (const ch of 'Hi! A') tap(ch.charCodeAt(0));
    // The client's own Shift around shifted symbols: each is typed once, as it says.
    c.key(true, SHIFT);
    tap(0x42); // B
    tap(0x40); // @
    tap(0x63); // c: an unshifted letter while the client holds Shift
    c.key(false, SHIFT);
    // Overlapping keys, as fast typing sends them, and a key repeated before its release.
    c.key(true, 0x44); // D
    c.key(true, 0x65); // e
    c.key(false, 0x44);
    c.key(false, 0x65);
    c.key(true, 0x46); // F
    c.key(true, 0x46);
    c.key(false, 0x46);
    // A marker last: once it is in, every key before it is too. Nothing is left down, so a
    // plain letter types in lower case.
    tap(0x67); // g
    tap(0x2e); // .
    const value = () => page.evaluate(() => document.getElementById('typed').value);
    await waitFor(async () => (await value()).endsWith('.'),
                  { what: 'the marker in the input', timeoutMs: 10000 });
    assert.equal(await value(), 'Hi! AB@cDeFFg.');
    c.close();
    await page.evaluate(() => document.getElementById('typed').remove());
  });

  test('a view token watches but its clicks and keys never reach the page', async () => {
    const viewer = await wsViewer(vncUrl(mintToken(ctx.server.stateDir, s.id, 'view', inAnHour())));
    await viewer.fullFrame();
    assert.ok(near(viewer.rgb(box.x + 40, box.y + 40), BOX));
    await pageLog();
    viewer.pointer(0, box.x, box.y);
    viewer.pointer(1, box.x, box.y);
    viewer.pointer(0, box.x, box.y);
    viewer.key(true, 0x76); // v
    viewer.key(false, 0x76);
    viewer.cutText('from a viewer');
    // An update answered after the input proves cabind read (and dropped) the input first.
    viewer.request(false);
    await viewer.update();
    // Then a marker key from a control viewer: once the page has it, anything the view viewer
    // had got through would have arrived before it.
    const ctl = await wsViewer(vncUrl(mintToken(ctx.server.stateDir, s.id, 'control', inAnHour())));
    ctl.key(true, 0x7a); // z
    ctl.key(false, 0x7a);
    const seen = [];
    await waitFor(async () => {
      seen.push(...(await pageLog()));
      return seen.some((e) => e.key === 'z');
    }, { what: 'the marker key', timeoutMs: 10000 });
    assert.deepEqual(seen.filter((e) => e.key !== 'z'), [], 'the view viewer\'s input arrived');
    // The viewer is still connected and served.
    viewer.request(false);
    assert.ok((await viewer.update()) > 0);
    viewer.close();
    ctl.close();
  });

  test('expired, other-session, wrong-scope and missing tokens are refused', async () => {
    const now = Math.floor(Date.now() / 1000);
    const refused = async (url, status, code) => {
      const err = await wsOpen(url).then((ws) => { ws.close(); return null; }, (e) => e);
      assert.ok(err, `${url} was accepted`);
      assert.equal(err.status, status, err.message);
      assert.equal(err.json?.error?.code, code, err.body);
    };
    await refused(vncUrl(mintToken(ctx.server.stateDir, s.id, 'control', now - 1)), 401,
                  'token_expired');
    await refused(vncUrl(mintToken(ctx.server.stateDir, 'ses_aaaaaaaaaaaaaaaaaaaa', 'view',
                                   inAnHour())), 401, 'invalid_token');
    const cdpToken = new URL(s.cdp_url).searchParams.get('token');
    await refused(vncUrl(cdpToken), 403, 'token_scope');
    await refused(`ws://${ctx.server.hostPort}/v1/sessions/${s.id}/vnc`, 401, 'unauthenticated');
    await refused(vncUrl(mintToken(ctx.server.stateDir, s.id, 'view', inAnHour(), 7)), 401,
                  'token_revoked');
  });

  test('malformed RFB closes that one connection with 1008, others carry on', async () => {
    const token = mintToken(ctx.server.stateDir, s.id, 'control', inAnHour());
    const good = await wsViewer(vncUrl(token));
    const cases = [
      ['unknown message type', Buffer.from([7, 0, 0, 0])],
      ['huge cut text', Buffer.from([6, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff])],
      ['too many encodings', Buffer.from([2, 0, 0xff, 0xff])],
    ];
    for (const [what, bytes] of cases) {
      const bad = await wsViewer(vncUrl(token));
      bad.send(bytes);
      const closed = await withDeadline(new Promise((resolve) => {
        if (bad.closed) resolve(bad.closed);
        bad.socket.once('close', (code, reason) => resolve({ code, reason: String(reason) }));
      }), 10000, `close after ${what}`);
      assert.equal(closed.code, 1008, what);
      assert.match(closed.reason, /RFB|ClientCutText|SetEncodings/, what);
    }
    // A client that is not RFB at all.
    const raw = await wsOpen(vncUrl(token));
    const closedRaw = new Promise((resolve) => raw.once('close', (code) => resolve(code)));
    raw.send(Buffer.from('GET / HTTP/1.1\r\n\r\n'));
    assert.equal(await withDeadline(closedRaw, 10000, 'close after a non-RFB client'), 1008);
    good.request(false);
    assert.ok((await good.update()) > 0, 'the other viewer is still served');
    good.close();
  });

  test('cabind vnc-forward carries a native client to a framebuffer that matches the screen',
       async () => {
    const child = spawn(path.join(BIN_DIR, 'cabind'),
                        ['vnc-forward', s.id, '--port', '0', '--server', ctx.server.base],
                        { env: { ...process.env, CABIN_API_KEY: ctx.server.key },
                          stdio: ['ignore', 'pipe', 'pipe'] });
    const stderr = [];
    child.stderr.on('data', (d) => stderr.push(String(d)));
    try {
      const line = await withDeadline(new Promise((resolve) => {
        readline.createInterface({ input: child.stdout }).once('line', resolve);
      }), 10000, 'vnc-forward to listen');
      const port = Number(/^forwarding 127\.0\.0\.1:(\d+) to session /.exec(line)?.[1]);
      assert.ok(port > 0, line);
      const sock = net.connect(port, '127.0.0.1');
      await new Promise((resolve, reject) => {
        sock.once('connect', resolve);
        sock.once('error', reject);
      });
      const c = RfbClient.tcp(sock);
      await c.handshake();
      assert.equal(c.width, W);
      assert.equal(c.height, H);
      // Take the pointer off the page's content, then compare with a screenshot.
      c.pointer(0, W - 2, H - 2);
      let diff = Infinity;
      await waitFor(async () => {
        await c.fullFrame();
        const res = await fetch(`${ctx.server.base}/v1/sessions/${s.id}/screenshot`,
                                { headers: { authorization: `Bearer ${ctx.server.key}` } });
        assert.equal(res.status, 200);
        const png = decodePng(Buffer.from(await res.arrayBuffer()));
        assert.equal(png.width, W);
        diff = 0;
        for (let y = 0; y < H; y += 2) {
          for (let x = 0; x < W; x += 2) if (!near(c.rgb(x, y), png.rgb(x, y), 0)) diff++;
        }
        // The RFB picture has the pointer drawn in (a Raw-only client has no cursor
        // encoding); the screenshot does not.
        return diff <= 32 * 32;
      }, { what: 'the forwarded framebuffer to match the screenshot', timeoutMs: 15000 });
      assert.ok(diff <= 32 * 32, `${diff} sampled pixels differ`);
      assert.deepEqual(c.rgb(box.left + 5, box.top + 5), BOX);
      c.close();
    } finally {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
    }
    assert.ok(!stderr.join('').includes('refused'), stderr.join(''));
  });

  test('DELETE closes every viewer of the session', async () => {
    const other = await ctx.server.createSession({ resolution: { width: 640, height: 480 } });
    const viewers = await Promise.all([wsViewer(other.vnc_url), wsViewer(other.vnc_url)]);
    const closed = viewers.map((v) => new Promise((resolve) => {
      if (v.closed) resolve(v.closed);
      v.socket.once('close', (code) => resolve({ code }));
    }));
    await ctx.server.deleteSession(other.id);
    for (const c of await withDeadline(Promise.all(closed), 10000, 'viewers to close')) {
      assert.ok([1000, 1006].includes(c.code), `close code ${c.code}`);
    }
    const after = await wsOpen(other.vnc_url).then((ws) => { ws.close(); return null; }, (e) => e);
    assert.equal(after?.status, 404);
  });

  test('vnc-forward serves only its own user', async () => {
    assert.equal(process.getuid(), 0, 'needs root to connect as another user');
    const fwd = await startForward(s.id, ctx.server);
    try {
      assert.equal(await firstBytesAs(65534, fwd.port), '');
      await waitFor(() => fwd.stderr().includes('refused a connection from uid 65534'),
                    { what: 'the refusal in the log' });
      assert.equal(await firstBytesAs(process.getuid(), fwd.port), 'RFB 003.008\n');
    } finally {
      await fwd.stop();
    }
  });

  test('vnc-forward dials an https server over wss, checking its certificate', async () => {
    const server = await startCabind({ args: ['--tls-self-signed'] });
    try {
      const ca = path.join(server.stateDir, 'tls', 'self-signed.crt');
      const created = await httpsJson(`${server.base}/v1/sessions`, {
        ca: fs.readFileSync(ca), key: server.key, method: 'POST',
        body: { resolution: { width: 640, height: 480 } },
      });
      assert.equal(created.status, 201, JSON.stringify(created.json));
      const t = created.json;
      const trusted = await startForward(t.id, server, ['--ca-file', ca]);
      try {
        assert.equal(await firstBytesAs(process.getuid(), trusted.port), 'RFB 003.008\n',
                     trusted.stderr());
      } finally {
        await trusted.stop();
      }
      // Without the certificate the server is not trusted: nothing is forwarded.
      const untrusted = await startForward(t.id, server);
      try {
        assert.equal(await firstBytesAs(process.getuid(), untrusted.port), '');
        await waitFor(() => untrusted.stderr().includes('TLS with 127.0.0.1'),
                      { what: 'the TLS failure in the log' });
      } finally {
        await untrusted.stop();
      }
      await httpsJson(`${server.base}/v1/sessions/${t.id}`,
                      { ca: fs.readFileSync(ca), key: server.key, method: 'DELETE' });
    } finally {
      await server.stop();
    }
  });

  test('vnc-forward needs an API key and a session id', async () => {
    const run = (args, env) => new Promise((resolve) => {
      const ch = spawn(path.join(BIN_DIR, 'cabind'), ['vnc-forward', ...args],
                       { env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
      let err = '';
      ch.stderr.on('data', (d) => { err += d; });
      ch.once('exit', (code) => resolve({ code, err }));
    });
    const noKey = await run([s.id, '--port', '0'], {});
    assert.equal(noKey.code, 2);
    assert.match(noKey.err, /CABIN_API_KEY/);
    const badId = await run(['../x', '--port', '0'], { CABIN_API_KEY: 'k' });
    assert.equal(badId.code, 2);
    assert.match(badId.err, /session id/);
  });
});
