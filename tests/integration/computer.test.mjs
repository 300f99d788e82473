// Computer use against a real session: actions in Anthropic's, OpenAI's and Cabin's own
// vocabularies land exactly where and as the page sees them; screenshots show the page.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';

import { pixelAt, pngDecode, pngSize, useCabind, waitFor } from './helpers.mjs';

const ctx = useCabind();
const W = 1280;
const H = 800;

// A page that records every pointer, key, wheel and input event with screen coordinates.
const PAGE = `<!doctype html><title>recorder</title>
<style>body{margin:0} #box{position:absolute;left:100px;top:100px;width:200px;height:100px;
background:rgb(255,0,0)} textarea{position:absolute;left:400px;top:100px;width:400px;height:200px}
</style><div id=box></div><textarea id=t></textarea><div style="height:5000px"></div>
<script>
window.log = [];
const rec = (e) => window.log.push({type: e.type, x: e.screenX, y: e.screenY, button: e.button,
  key: e.key, detail: e.detail, ctrl: e.ctrlKey, shift: e.shiftKey, dy: e.deltaY});
for (const t of ['mousedown','mouseup','click','dblclick','contextmenu','auxclick','keydown',
                 'keyup','wheel']) addEventListener(t, rec, true);
addEventListener('contextmenu', (e) => e.preventDefault());
</script>`;

describe('computer use', () => {
  let s, browser, page;
  const act = (body) => ctx.server.api('POST', `/v1/sessions/${s.id}/computer`, body);
  const log = async () => page.evaluate(() => window.log.splice(0));
  // Input reaches the page asynchronously after the API answers: collect events until `done`
  // holds for them (or the deadline passes), then hand them over.
  const events = async (done, what) => {
    const seen = [];
    await waitFor(async () => {
      seen.push(...(await log()));
      return done(seen);
    }, { what, timeoutMs: 5000 });
    return seen;
  };
  before(async () => {
    s = await ctx.server.createSession({ resolution: { width: W, height: H } });
    browser = await chromium.connectOverCDP(s.cdp_url);
    page = browser.contexts()[0].pages()[0];
    await page.setContent(PAGE);
    await page.bringToFront();
  });
  after(async () => {
    await browser?.close();
    if (s) await ctx.server.api('DELETE', `/v1/sessions/${s.id}`);
  });

  // Screen coordinates of a point in the page (the browser's own toolbar is above it).
  async function screenPoint(cx, cy) {
    const o = await page.evaluate(() => ({
      x: window.screenX + (window.outerWidth - window.innerWidth),
      y: window.screenY + (window.outerHeight - window.innerHeight),
    }));
    return [o.x + cx, o.y + cy];
  }

  test('Anthropic clicks land on the exact pixel, with held modifiers', async () => {
    const [x, y] = await screenPoint(150, 130);
    let r = await act({ action: 'left_click', coordinate: [x, y] });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.results, [{ op: 'click' }]);
    const ev = (await events((l) => l.some((e) => e.type === 'click'), 'click'))
      .filter((e) => e.type === 'click');
    assert.equal(ev.length, 1);
    assert.deepEqual([ev[0].x, ev[0].y, ev[0].button], [x, y, 0]);

    r = await act({ action: 'left_click', coordinate: [x + 3, y + 4], text: 'shift' });
    assert.equal(r.status, 200, r.text);
    const shifted = (await events((l) => l.some((e) => e.type === 'click'), 'shift-click'))
      .find((e) => e.type === 'click');
    assert.deepEqual([shifted.x, shifted.y, shifted.shift], [x + 3, y + 4, true]);

    r = await act({ actions: [
      { action: 'right_click', coordinate: [x, y] },
      { action: 'middle_click', coordinate: [x, y] },
    ] });
    assert.equal(r.status, 200, r.text);
    const want = ['contextmenu:2', 'auxclick:1'];
    const types = (await events(
      (l) => want.every((w) => l.some((e) => `${e.type}:${e.button}` === w)), 'clicks'))
      .map((e) => `${e.type}:${e.button}`);
    assert.ok(types.includes('contextmenu:2'), types.join(' '));
    assert.ok(types.includes('auxclick:1'), types.join(' '));
  });

  test('double and triple clicks, wheel notches and drags reach the page as such', async () => {
    const [x, y] = await screenPoint(150, 130);
    let r = await act({ actions: [
      { action: 'double_click', coordinate: [x, y] },
      { action: 'wait', duration: 0.6 },  // beyond the double-click interval: a new series
      { action: 'triple_click', coordinate: [x, y] },
    ] });
    assert.equal(r.status, 200, r.text);
    const clicks = (await events((l) => l.filter((e) => e.type === 'click').length === 5, 'clicks'))
      .filter((e) => e.type === 'click' || e.type === 'dblclick')
      .map((e) => `${e.type}:${e.detail}`);
    assert.deepEqual(clicks, ['click:1', 'click:2', 'dblclick:2', 'click:1', 'click:2',
                              'dblclick:2', 'click:3']);

    r = await act({ action: 'scroll', coordinate: [x, y], scroll_direction: 'down',
                    scroll_amount: 3 });
    assert.equal(r.status, 200, r.text);
    // Chromium may coalesce notches into one event: add up the deltas, 120 per notch.
    const wheel = (await events((l) => l.filter((e) => e.type === 'wheel')
      .reduce((a, e) => a + e.dy, 0) >= 360, 'wheel down')).filter((e) => e.type === 'wheel');
    assert.equal(wheel.reduce((a, e) => a + e.dy, 0), 360);
    assert.deepEqual([wheel[0].x, wheel[0].y], [x, y]);
    r = await act({ type: 'scroll', x, y, scroll_x: 0, scroll_y: -300 });
    assert.equal(r.status, 200, r.text);
    const up = (await events((l) => l.filter((e) => e.type === 'wheel')
      .reduce((a, e) => a + e.dy, 0) <= -360, 'wheel up')).filter((e) => e.type === 'wheel');
    assert.equal(up.reduce((a, e) => a + e.dy, 0), -360);
    await waitFor(async () => (await page.evaluate(() => window.scrollY)) === 0, { what: 'top' });

    // The triple click selected text, and a press on a selection starts a drag-and-drop.
    await page.evaluate(() => window.getSelection().removeAllRanges());
    r = await act({ action: 'left_click_drag', start_coordinate: [x, y],
                    coordinate: [x + 40, y + 25] });
    assert.equal(r.status, 200, r.text);
    const drag = (await events((l) => l.some((e) => e.type === 'mouseup'), 'drag'))
      .filter((e) => e.type === 'mousedown' || e.type === 'mouseup')
      .map((e) => [e.type, e.x, e.y]);
    assert.deepEqual(drag, [['mousedown', x, y], ['mouseup', x + 40, y + 25]]);
  });

  test('typing is exact for mixed scripts, and chords reach the page', async () => {
    const [x, y] = await screenPoint(600, 200);
    const text = 'Hello, Grüße ß 日本語 🙂 ok';
    let r = await act({ actions: [
      { action: 'left_click', coordinate: [x, y] },
      { action: 'type', text },
    ] });
    assert.equal(r.status, 200, r.text);
    await waitFor(async () => (await page.inputValue('#t')) === text, { what: 'typed text' });
    r = await act({ actions: [{ action: 'key', text: 'ctrl+a' }, { action: 'type', text: 'x' }] });
    assert.equal(r.status, 200, r.text);
    await waitFor(async () => (await page.inputValue('#t')) === 'x', { what: 'ctrl+a replaced' });
    r = await act({ type: 'keypress', keys: ['CTRL', 'A'] });
    assert.equal(r.status, 200, r.text);
    await events((l) => l.some((e) => e.type === 'keydown' && e.key === 'a' && e.ctrl), 'ctrl+a');
    // Nothing stays held: a plain click afterwards carries no modifier.
    const [px, py] = await screenPoint(150, 130);
    await act({ action: 'left_click', coordinate: [px, py] });
    const plain = (await events((l) => l.some((e) => e.type === 'click'), 'plain click'))
      .find((e) => e.type === 'click');
    assert.deepEqual([plain.ctrl, plain.shift], [false, false]);
  });

  test('OpenAI actions in a declared model space are scaled exactly', async () => {
    const [sx, sy] = await screenPoint(150, 130);
    // Model space 640x400 is half the screen: model pixel m covers screen pixels 2m and 2m+1,
    // and lands on floor((m + 0.5) * 2) = 2m + 1, its centre (docs/computer-use.md).
    const mx = Math.floor(sx / 2);
    const my = Math.floor(sy / 2);
    const r = await act({ actions: [{ type: 'click', x: mx, y: my, button: 'left' }],
                          display: { width: 640, height: 400 } });
    assert.equal(r.status, 200, r.text);
    const ev = (await events((l) => l.some((e) => e.type === 'click'), 'scaled click'))
      .find((e) => e.type === 'click');
    assert.deepEqual([ev.x, ev.y], [2 * mx + 1, 2 * my + 1]);
    const pos = await act({ actions: [{ action: 'cursor_position' }],
                            display: { width: 640, height: 400 } });
    assert.deepEqual(pos.json.results[0], { op: 'cursor_position', x: mx, y: my });
  });

  test('a display declared for the session scales every request that does not declare one',
    async () => {
      const s2 = await ctx.server.createSession({ resolution: { width: W, height: H },
                                                  display: { width: 640, height: 400 } });
      try {
        assert.deepEqual(s2.display, { width: 640, height: 400 });
        const move = await ctx.server.api('POST', `/v1/sessions/${s2.id}/computer`, { actions: [
          { action: 'mouse_move', coordinate: [100, 50] }, { action: 'cursor_position' },
          { action: 'screenshot' }] });
        assert.equal(move.status, 200, move.text);
        assert.deepEqual(move.json.results[1], { op: 'cursor_position', x: 100, y: 50 });
        assert.deepEqual([move.json.results[2].width, move.json.results[2].height], [640, 400]);
        // A request's own display wins.
        const own = await ctx.server.api('POST', `/v1/sessions/${s2.id}/computer`, {
          actions: [{ action: 'cursor_position' }], display: { width: W, height: H } });
        assert.deepEqual(own.json.results[0], { op: 'cursor_position', x: 201, y: 101 });
        const off = await ctx.server.api('POST', `/v1/sessions/${s2.id}/computer`,
          { action: 'left_click', coordinate: [640, 10] });
        assert.equal(off.status, 400, off.text);
      } finally {
        await ctx.server.api('DELETE', `/v1/sessions/${s2.id}`);
      }
    });

  test('at 1920x1080, the browser is on screen at 201 and the first clicks land on the exact pixel',
    async () => {
      // Nothing waits between the 201 and the first screenshot, nor (but for listeners added to
      // the blank start page) between it and the first click.
      const big = await ctx.server.createSession({ resolution: { width: 1920, height: 1080 } });
      let b2;
      try {
        const shot = await ctx.server.api('POST', `/v1/sessions/${big.id}/computer`,
          { action: 'screenshot' });
        assert.equal(shot.status, 200, shot.text);
        b2 = await chromium.connectOverCDP(big.cdp_url);
        const p2 = b2.contexts()[0].pages()[0];
        const o = await p2.evaluate(() => {
          window.log = [];
          addEventListener('mousedown', (e) => window.log.push(
            { type: e.type, x: e.screenX, y: e.screenY, ctrl: e.ctrlKey }), true);
          return {
            x: window.screenX + (window.outerWidth - window.innerWidth),
            y: window.screenY + (window.outerHeight - window.innerHeight),
          };
        });
        for (const [cx, cy] of [[150, 130], [1700, 900]]) {
          const [x, y] = [o.x + cx, o.y + cy];
          const r = await ctx.server.api('POST', `/v1/sessions/${big.id}/computer`, {
            actions: [{ op: 'click', x, y, button: 'left', count: 1, modifiers: ['ctrl'] }] });
          assert.equal(r.status, 200, r.text);
          let ev;
          await waitFor(async () => {
            ev = (await p2.evaluate(() => window.log.splice(0))).find((e) => e.type === 'mousedown');
            return ev;
          }, { what: 'mousedown at 1920x1080' });
          assert.deepEqual([ev.x, ev.y, ev.ctrl], [x, y, true]);
        }
        // The screenshot taken right after the 201 already showed Chromium's window, mapped and
        // drawn: one light colour across a block, where the bare root window has X's weave of
        // black and white pixels.
        const first = pngDecode(Buffer.from(shot.json.results[0].data, 'base64'));
        const block = [];
        for (let dy = 0; dy < 4; dy++) {
          for (let dx = 0; dx < 4; dx++) block.push(pixelAt(first, 1000 + dx, 600 + dy).join());
        }
        assert.equal(new Set(block).size, 1, `one colour at the 201: ${[...new Set(block)]}`);
        assert.ok(pixelAt(first, 1000, 600).every((c) => c > 200), `light: ${block[0]}`);
      } finally {
        await b2?.close();
        await ctx.server.api('DELETE', `/v1/sessions/${big.id}`);
      }
    });

  test('typing stays exact when the text needs more keycodes than the layout has spare',
    async () => {
      // About twenty keycodes are free on Xvfb's layout, so each text below reuses borrowed
      // keycodes while Chromium may still be reading presses typed with their earlier mapping.
      const [x, y] = await screenPoint(600, 200);
      const r = await act({ action: 'left_click', coordinate: [x, y] });
      assert.equal(r.status, 200, r.text);
      for (let i = 0; i < 3; i++) {
        await page.fill('#t', '');
        let cjk = '';
        for (let k = 0; k < 30; k++) cjk += String.fromCodePoint(0x4e00 + 40 * i + k);
        const text = `Grüße, naïve café — ${cjk} テスト 🙂 ok`;
        const t = await act({ action: 'type', text });
        assert.equal(t.status, 200, t.text);
        let got = '';
        // On a timeout the assertion below shows what arrived instead.
        await waitFor(async () => (got = await page.inputValue('#t')) === text,
          { what: `typed text ${i}`, timeoutMs: 5000 }).catch(() => {});
        assert.equal(got, text);
      }
    });

  test('screenshots decode at the asked size and show the page', async () => {
    const png = await fetch(`${ctx.server.base}/v1/sessions/${s.id}/screenshot`, {
      headers: { authorization: `Bearer ${ctx.server.key}` },
    });
    assert.equal(png.status, 200);
    assert.equal(png.headers.get('content-type'), 'image/png');
    assert.deepEqual(pngSize(Buffer.from(await png.arrayBuffer())), { width: W, height: H });
    const half = await fetch(`${ctx.server.base}/v1/sessions/${s.id}/screenshot?scale=0.5`, {
      headers: { authorization: `Bearer ${ctx.server.key}` },
    });
    assert.deepEqual(pngSize(Buffer.from(await half.arrayBuffer())), { width: 640, height: 400 });
    const jpeg = await fetch(
      `${ctx.server.base}/v1/sessions/${s.id}/screenshot?format=jpeg&quality=50`,
      { headers: { authorization: `Bearer ${ctx.server.key}` } });
    assert.equal(jpeg.headers.get('content-type'), 'image/jpeg');
    const bytes = Buffer.from(await jpeg.arrayBuffer());
    assert.deepEqual([...bytes.subarray(0, 2)], [0xff, 0xd8]);
    // The red box, as a region: a zoom returns it at full resolution.
    const [bx, by] = await screenPoint(110, 110);
    const z = await act({ action: 'zoom', region: [bx, by, bx + 20, by + 20] });
    assert.equal(z.status, 200, z.text);
    const img = z.json.results[0];
    assert.equal(img.media_type, 'image/png');
    assert.deepEqual([img.width, img.height], [20, 20]);
    // Every pixel of the zoomed region is the box's red.
    const zoomed = pngDecode(Buffer.from(img.data, 'base64'));
    for (const [x, y] of [[0, 0], [19, 0], [10, 10], [0, 19], [19, 19]]) {
      assert.deepEqual(pixelAt(zoomed, x, y), [255, 0, 0], `zoom pixel ${x},${y}`);
    }
    // The whole screen shows the box where the page drew it, and white around it.
    const full = pngDecode(Buffer.from(await (await fetch(
      `${ctx.server.base}/v1/sessions/${s.id}/screenshot`,
      { headers: { authorization: `Bearer ${ctx.server.key}` } })).arrayBuffer()));
    const [ox, oy] = await screenPoint(0, 0);
    assert.deepEqual(pixelAt(full, ox + 100, oy + 100), [255, 0, 0], 'box top-left');
    assert.deepEqual(pixelAt(full, ox + 299, oy + 199), [255, 0, 0], 'box bottom-right');
    assert.deepEqual(pixelAt(full, ox + 99, oy + 100), [255, 255, 255], 'left of the box');
    assert.deepEqual(pixelAt(full, ox + 300, oy + 199), [255, 255, 255], 'right of the box');
  });

  test('bad input is refused with a clear error and the session stays usable', async () => {
    for (const [body, status, code] of [
      [{ action: 'fly' }, 400, null],
      [{ action: 'left_click', coordinate: [W, 10] }, 400, null],
      [{ type: 'click', x: -1, y: 5, button: 'left' }, 400, null],
      [{ action: 'wait', duration: 36000 }, 400, null],
      [{ actions: Array.from({ length: 100000 }, () => ({ action: 'cursor_position' })) }, 413,
       'body_too_large'],
      [{ action: 'type', text: 'x'.repeat(200000) }, 400, null],
    ]) {
      const r = await act(body);
      assert.equal(r.status, status, `${JSON.stringify(body).slice(0, 80)} -> ${r.text.slice(0, 200)}`);
      assert.ok(r.json?.error?.code, 'a JSON error');
      if (code) assert.equal(r.json.error.code, code);
    }
    const r = await act({ action: 'cursor_position' });
    assert.equal(r.status, 200, r.text);
  });
});
