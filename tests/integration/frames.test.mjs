// Frame streams: a WebSocket that sends an image whenever the screen changes (and none while it
// is still), capped at the asked rate and shared by viewers of the same frames; an MJPEG stream
// for an <img>; their errors and their access rules.
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';

import { pixelAt, pngDecode, pngSize, useCabind, waitFor, wsOpen } from './helpers.mjs';

const ctx = useCabind();

// A capability token signed with the server's own key, as cabind signs them.
function mint(stateDir, sid, scope, ttlS = 300) {
  const dir = path.join(stateDir, 'keys');
  const file = fs.readdirSync(dir).filter((f) => /^token-.+\.key$/.test(f)).sort().pop();
  const kid = file.slice('token-'.length, -'.key'.length);
  const key = fs.readFileSync(path.join(dir, file), 'utf8').trim();
  const payload = [sid, scope, Math.floor(Date.now() / 1000) + ttlS, kid, 0].join('~');
  const b64 = (b) => Buffer.from(b).toString('base64url');
  const mac = createHmac('sha256', key).update(`cabin-token-v1\0${payload}`).digest();
  return `${b64(payload)}.${b64(mac)}`;
}

// Collects a frame stream's messages: `hello` (the first, text) and `frames` (binary, with
// their arrival times).
async function viewer(url, headers) {
  const v = { ws: null, hello: null, frames: [], closed: null };
  const ws = await wsOpen(url, {
    headers,
    onMessage: (data, binary) => {
      if (binary) v.frames.push({ at: Date.now(), data });
      else v.hello = JSON.parse(data.toString());
    },
  });
  v.ws = ws;
  ws.on('close', (code, reason) => { v.closed = { code, reason: reason.toString() }; });
  await waitFor(() => v.hello, { what: 'hello' });
  return v;
}

describe('frame streams', () => {
  let s, browser, page, wsBase, auth;
  before(async () => {
    s = await ctx.server.createSession({ resolution: { width: 1280, height: 800 } });
    browser = await chromium.connectOverCDP(s.cdp_url);
    page = browser.contexts()[0].pages()[0];
    await page.setContent(`<!doctype html><body style="margin:0;background:#fff">
      <div id=b style="width:100px;height:100px;background:red"></div>`);
    wsBase = `${ctx.server.base.replace('http', 'ws')}/v1/sessions/${s.id}`;
    auth = { authorization: `Bearer ${ctx.server.key}` };
  });
  after(async () => {
    await browser?.close();
  });

  const animate = () => page.evaluate(() => {
    let i = 0;
    window.anim = setInterval(() => {
      document.getElementById('b').style.marginLeft = `${(i++ % 400)}px`;
    }, 10);
  });
  const still = () => page.evaluate(() => clearInterval(window.anim));

  test('frames come when the page animates, at most fps a second, and none when it is still',
    async () => {
      const v = await viewer(`${wsBase}/frames?format=png&scale=0.5&fps=5`, auth);
      assert.deepEqual(v.hello, { type: 'hello', format: 'png', fps: 5, viewers: 1 });
      // The first frame shows the screen as it is, scaled.
      await waitFor(() => v.frames.length >= 1, { what: 'first frame' });
      assert.deepEqual(pngSize(v.frames[0].data), { width: 640, height: 400 });
      // Once the browser has finished painting, a still screen sends nothing.
      await waitFor(async () => {
        const n = v.frames.length;
        await new Promise((r) => setTimeout(r, 1000));
        return v.frames.length === n;
      }, { what: 'the page to settle', timeoutMs: 10000 });
      const settled = v.frames.length;
      // The red 100x100 box at the page's top-left, at half size.
      const last = pngDecode(v.frames.at(-1).data);
      const o = await page.evaluate(() => ({
        x: window.screenX + (window.outerWidth - window.innerWidth),
        y: window.screenY + (window.outerHeight - window.innerHeight),
      }));
      assert.deepEqual(pixelAt(last, Math.round((o.x + 50) / 2), Math.round((o.y + 50) / 2)),
        [255, 0, 0]);
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(v.frames.length, settled, 'frames were sent while the screen was still');

      await animate();
      await waitFor(() => v.frames.length >= settled + 8, { what: '8 more frames', timeoutMs: 15000 });
      await still();
      const moving = v.frames.slice(settled);
      const spanS = (moving.at(-1).at - moving[0].at) / 1000;
      // 5 fps: n frames need at least (n - 1) / 5 s; allow for delivery jitter.
      assert.ok(spanS >= (moving.length - 1) / 5 - 0.3,
        `${moving.length} frames in ${spanS.toFixed(2)} s exceed 5 fps`);
      v.ws.close();
    });

  test('viewers of the same frames share one stream; others get their own', async () => {
    const url = `${wsBase}/frames?format=jpeg&quality=60&scale=0.25&fps=10`;
    const a = await viewer(url, auth);
    const b = await viewer(url, auth);
    const c = await viewer(url, auth);
    assert.deepEqual([a.hello.viewers, b.hello.viewers, c.hello.viewers], [1, 2, 3]);
    const other = await viewer(`${wsBase}/frames?format=jpeg&quality=61&scale=0.25&fps=10`, auth);
    assert.equal(other.hello.viewers, 1);
    await animate();
    await waitFor(() => [a, b, c, other].every((v) => v.frames.length >= 3), { what: 'frames' });
    await still();
    for (const v of [a, b, c, other]) {
      assert.deepEqual([...v.frames[0].data.subarray(0, 2)], [0xff, 0xd8], 'a JPEG');
      v.ws.close();
    }
    // The shared stream outlives a viewer that leaves, and ends with the last one.
    await waitFor(() => [a, b, c, other].every((v) => v.closed), { what: 'closes' });
    const d = await viewer(url, auth);
    assert.equal(d.hello.viewers, 1);
    d.ws.close();
  });

  test('an MJPEG stream sends JPEG parts', async () => {
    const res = await fetch(`${ctx.server.base}/v1/sessions/${s.id}/frames.mjpeg?scale=0.5&fps=10`,
      { headers: auth });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'multipart/x-mixed-replace; boundary=cabinframe');
    await animate();
    const reader = res.body.getReader();
    let buf = Buffer.alloc(0);
    const parts = [];
    while (parts.length < 3) {
      const { value, done } = await reader.read();
      assert.ok(!done, 'the stream ended early');
      buf = Buffer.concat([buf, value]);
      for (;;) {
        const m = /^--cabinframe\r\nContent-Type: image\/jpeg\r\nContent-Length: (\d+)\r\n\r\n/
          .exec(buf.toString('latin1', 0, 200));
        if (!m) break;
        const start = m[0].length;
        const len = Number(m[1]);
        if (buf.length < start + len + 2) break;
        parts.push(buf.subarray(start, start + len));
        assert.equal(buf.toString('latin1', start + len, start + len + 2), '\r\n');
        buf = buf.subarray(start + len + 2);
      }
    }
    await still();
    await reader.cancel();
    for (const p of parts) {
      assert.deepEqual([...p.subarray(0, 2)], [0xff, 0xd8]);
      assert.deepEqual([...p.subarray(-2)], [0xff, 0xd9]);
    }
  });

  test('a still screen\'s MJPEG frame is closed by the next part\'s headers', async () => {
    await still();
    const res = await fetch(`${ctx.server.base}/v1/sessions/${s.id}/frames.mjpeg`,
      { headers: auth });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    let buf = Buffer.alloc(0);
    const head = /^--cabinframe\r\nContent-Type: image\/jpeg\r\nContent-Length: (\d+)\r\n\r\n/;
    const parts = [];
    // A browser shows a part only once the next one's headers have come; once the screen is
    // still, its last frame comes again to close the one before.
    const settled = () => parts.length >= 2 && parts.at(-1).equals(parts.at(-2));
    while (!settled()) {
      assert.ok(parts.length < 20, 'the screen never settled');
      const { value, done } = await reader.read();
      assert.ok(!done, 'the stream ended early');
      buf = Buffer.concat([buf, value]);
      for (;;) {
        const m = head.exec(buf.toString('latin1', 0, 200));
        if (!m || buf.length < m[0].length + Number(m[1]) + 2) break;
        parts.push(buf.subarray(m[0].length, m[0].length + Number(m[1])));
        buf = buf.subarray(m[0].length + Number(m[1]) + 2);
      }
    }
    await reader.cancel();
  });

  test('access: view and control tokens watch; cdp tokens, strangers and bad queries do not',
    async () => {
      for (const scope of ['view', 'control']) {
        const v = await viewer(`${wsBase}/frames?token=${mint(ctx.server.stateDir, s.id, scope)}`);
        await waitFor(() => v.frames.length >= 1, { what: `a frame with a ${scope} token` });
        v.ws.close();
      }
      const cdpToken = new URL(s.cdp_url).searchParams.get('token');
      for (const [url, headers, status, code] of [
        [`${wsBase}/frames`, {}, 401, 'unauthenticated'],
        [`${wsBase}/frames?token=${cdpToken}`, {}, 403, 'token_scope'],
        [`${wsBase}/frames?token=${mint(ctx.server.stateDir, 'ses_aaaaaaaaaaaaaaaaaaaa', 'view')}`,
          {}, 401, null],
        [`${wsBase}/frames?token=${mint(ctx.server.stateDir, s.id, 'view', -5)}`, {}, 401, null],
        [`${wsBase}/frames?fps=0`, auth, 400, 'bad_query'],
        [`${wsBase}/frames?fps=61`, auth, 400, 'bad_query'],
        [`${wsBase}/frames?format=gif`, auth, 400, 'bad_query'],
        [`${wsBase}/frames?x=1200&y=0&w=100&h=10`, auth, 400, 'bad_query'],
        [`${wsBase}/frames?colour=1`, auth, 400, 'bad_query'],
      ]) {
        await assert.rejects(wsOpen(url, { headers }), (err) => {
          assert.equal(err.status, status, `${url}: ${err.message}`);
          assert.ok(err.json?.error?.code, 'a JSON error');
          if (code) assert.equal(err.json.error.code, code);
          return true;
        });
      }
      const mj = await ctx.server.api('GET', `/v1/sessions/${s.id}/frames.mjpeg?format=png`);
      assert.equal(mj.status, 400, mj.text);
      const plain = await ctx.server.api('GET', `/v1/sessions/${s.id}/frames`);
      assert.equal(plain.status, 400);
      assert.equal(plain.json.error.code, 'websocket_required');
    });

  test('a viewer is told when the session ends', async () => {
    const other = await ctx.server.createSession({ resolution: { width: 800, height: 600 } });
    const v = await viewer(
      `${ctx.server.base.replace('http', 'ws')}/v1/sessions/${other.id}/frames?fps=2`, auth);
    await waitFor(() => v.frames.length >= 1, { what: 'first frame' });
    const del = await ctx.server.api('DELETE', `/v1/sessions/${other.id}`);
    assert.equal(del.status, 200);
    await waitFor(() => v.closed, { what: 'the stream to close' });
    assert.equal(v.closed.code, 1001);
  });
});
