// A person takes the wheel, the clipboard, and the session's event stream: against a real
// session, with the page itself as the witness of what input reached it.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';

import { openSse, useCabind, waitFor, wsOpen } from './helpers.mjs';

const ctx = useCabind();

describe('control, clipboard and events', () => {
  let s, browser, page, base;
  const act = (body) => ctx.server.api('POST', `/v1/sessions/${s.id}/computer`, body);
  const control = (body, opts) =>
    ctx.server.api('POST', `/v1/sessions/${s.id}/control`, body, opts);

  before(async () => {
    s = await ctx.server.createSession({});
    base = ctx.server.base;
    browser = await chromium.connectOverCDP(s.cdp_url);
    page = browser.contexts()[0].pages()[0];
    await page.setContent(`<!doctype html><style>body{margin:0}
      #t{position:absolute;left:0;top:0;width:600px;height:300px}</style>
      <textarea id=t></textarea>
      <script>window.clicks = 0; addEventListener('mousedown', () => window.clicks++, true);</script>`);
    await page.bringToFront();
  });
  after(async () => {
    await browser?.close();
  });

  // Screen coordinates of a point in the page.
  async function screenPoint(cx, cy) {
    const o = await page.evaluate(() => ({
      x: window.screenX + (window.outerWidth - window.innerWidth),
      y: window.screenY + (window.outerHeight - window.innerHeight),
    }));
    return [o.x + cx, o.y + cy];
  }

  test('while someone holds control, agent input is refused and never reaches the page', async () => {
    const sse = await openSse(`${base}/v1/sessions/${s.id}/events`,
                              { authorization: `Bearer ${ctx.server.key}` });
    let r = await control({ action: 'take' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.held, true);
    assert.equal(r.json.holder, 'admin');

    const [x, y] = await screenPoint(300, 150);
    r = await act({ action: 'left_click', coordinate: [x, y] });
    assert.equal(r.status, 409, r.text);
    assert.equal(r.json.error.code, 'human_in_control');
    // Looking is still allowed.
    r = await act({ action: 'screenshot' });
    assert.equal(r.status, 200, r.text);

    r = await control({ action: 'release' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.held, false);
    r = await act({ action: 'left_click', coordinate: [x, y] });
    assert.equal(r.status, 200, r.text);
    // Exactly the click made after the release: the refused one never arrived.
    await waitFor(async () => (await page.evaluate(() => window.clicks)) >= 1, { what: 'click' });
    assert.equal(await page.evaluate(() => window.clicks), 1);

    await waitFor(() => sse.events.some((e) => e.type === 'control_released'),
                  { what: 'control_released event' });
    const kinds = sse.events.map((e) => `${e.type}:${e.holder}:${e.reason ?? ''}`);
    assert.deepEqual(kinds, ['control_taken:admin:', 'control_released:admin:released']);
    assert.ok(sse.events.every((e, i) => i === 0 || e.id === sse.events[i - 1].id + 1));
    sse.close();
  });

  test('a live view takes control with its token, and loses it when it leaves', async () => {
    const t = await ctx.server.api('POST', `/v1/sessions/${s.id}/tokens`, { scope: 'control' });
    assert.equal(t.status, 201, t.text);
    const token = encodeURIComponent(t.json.token);
    const wsBase = base.replace(/^http/, 'ws');
    const events = [];
    const ev = await wsOpen(`${wsBase}/v1/sessions/${s.id}/events?token=${token}`, {
      onMessage: (m) => events.push(JSON.parse(m.toString())),
    });
    const vnc = await wsOpen(`${wsBase}/v1/sessions/${s.id}/vnc?token=${token}`);
    let r = await ctx.server.api('POST', `/v1/sessions/${s.id}/control?token=${token}`,
                             { action: 'take' }, { key: null });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.holder, 'live_view');
    const status = await ctx.server.api('GET', `/v1/sessions/${s.id}/live/status?token=${token}`,
                                        undefined, { key: null });
    assert.equal(status.json.control.holder, 'live_view');
    // A view token may watch but not steer.
    const v = await ctx.server.api('POST', `/v1/sessions/${s.id}/tokens`, { scope: 'view' });
    r = await ctx.server.api('POST',
                             `/v1/sessions/${s.id}/control?token=${encodeURIComponent(v.json.token)}`,
                             { action: 'release' }, { key: null });
    assert.equal(r.status, 403, r.text);

    vnc.close();
    await waitFor(() => events.some((e) => e.type === 'control_released'),
                  { what: 'control_released after the viewer left' });
    const released = events.find((e) => e.type === 'control_released');
    assert.deepEqual([released.holder, released.reason], ['live_view', 'viewer_left']);
    r = await act({ action: 'screenshot' });
    assert.equal(r.status, 200);
    ev.close();
  });

  test('a control token holds the lock no longer than it lives, and cannot release an operator\'s', async () => {
    const t = await ctx.server.api('POST', `/v1/sessions/${s.id}/tokens`, { scope: 'control', ttl_s: 60 });
    assert.equal(t.status, 201, t.text);
    const token = encodeURIComponent(t.json.token);
    let r = await ctx.server.api('POST', `/v1/sessions/${s.id}/control?token=${token}`,
                                 { action: 'take', ttl_s: 3600 }, { key: null });
    assert.equal(r.status, 200, r.text);
    const left = (Date.parse(r.json.expires_at) - Date.now()) / 1000;
    assert.ok(left <= 61, `the lock outlives the token: ${left} s`);
    // The operator takes it with the key: the token can no longer let it go.
    r = await control({ action: 'take', ttl_s: 600 });
    assert.equal(r.json.holder, 'admin');
    r = await ctx.server.api('POST', `/v1/sessions/${s.id}/control?token=${token}`,
                             { action: 'release' }, { key: null });
    assert.equal(r.status, 403, r.text);
    assert.equal(r.json.error.code, 'control_not_yours');
    assert.equal((await ctx.server.api('GET', `/v1/sessions/${s.id}/live/status`)).json.control.holder, 'admin');
    r = await control({ action: 'release' });
    assert.equal(r.json.held, false);
  });

  test('control that is not taken again runs out', async () => {
    const mark = (await openSse(`${base}/v1/sessions/${s.id}/events`,
                                { authorization: `Bearer ${ctx.server.key}` }));
    const r = await control({ action: 'take', ttl_s: 1 });
    assert.equal(r.status, 200, r.text);
    await waitFor(() => mark.events.some((e) => e.type === 'control_released'),
                  { what: 'expiry', timeoutMs: 5000 });
    assert.equal(mark.events.find((e) => e.type === 'control_released').reason, 'expired');
    const [x, y] = await screenPoint(10, 10);
    assert.equal((await act({ action: 'left_click', coordinate: [x, y] })).status, 200);
    mark.close();
  });

  test('bad control requests are refused clearly', async () => {
    for (const [body, field] of [[{}, 'action'], [{ action: 'steal' }, 'action'],
                                  [{ action: 'take', ttl_s: 0 }, 'ttl_s'],
                                  [{ action: 'take', ttl_s: 3601 }, 'ttl_s'],
                                  [{ action: 'take', who: 'me' }, 'who']]) {
      const r = await control(body);
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
      assert.match(r.json.error.message, new RegExp(field));
    }
  });

  test('a reconnect with ?since= or Last-Event-ID replays what it missed', async () => {
    const first = await openSse(`${base}/v1/sessions/${s.id}/events`,
                                { authorization: `Bearer ${ctx.server.key}` });
    await control({ action: 'take' });
    await waitFor(() => first.events.length >= 1, { what: 'the first event' });
    const seen = first.events.at(-1).id;
    first.close();
    // Missed while away:
    await control({ action: 'release' });
    await control({ action: 'take' });
    await control({ action: 'release' });

    const wsBase = base.replace(/^http/, 'ws');
    const got = [];
    const ws = await wsOpen(`${wsBase}/v1/sessions/${s.id}/events?since=${seen}`, {
      headers: { authorization: `Bearer ${ctx.server.key}` },
      onMessage: (m) => got.push(JSON.parse(m.toString())),
    });
    await waitFor(() => got.length >= 3, { what: 'the replay' });
    assert.deepEqual(got.slice(0, 3).map((e) => [e.seq, e.type]),
                     [[seen + 1, 'control_released'], [seen + 2, 'control_taken'],
                      [seen + 3, 'control_released']]);
    ws.close();

    const again = await openSse(`${base}/v1/sessions/${s.id}/events`,
                                { authorization: `Bearer ${ctx.server.key}`,
                                  'last-event-id': String(seen + 2) });
    await waitFor(() => again.events.length >= 1, { what: 'Last-Event-ID replay' });
    assert.equal(again.events[0].id, seen + 3);
    again.close();

    const bad = await ctx.server.api('GET', `/v1/sessions/${s.id}/events?since=x1`);
    assert.equal(bad.status, 400, bad.text);
  });

  test('clipboard round-trips mixed scripts and emoji, both ways with the page', async () => {
    const text = 'Grüße, naïve café — 中文 テスト עברית 🙂👍🏽 ok';
    let r = await ctx.server.api('PUT', `/v1/sessions/${s.id}/clipboard`, { text });
    assert.equal(r.status, 200, r.text);
    r = await ctx.server.api('GET', `/v1/sessions/${s.id}/clipboard`);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.text, text);

    // Pasted into the page: the X clipboard really holds it.
    await page.evaluate(() => { document.getElementById('t').value = ''; });
    const [x, y] = await screenPoint(300, 150);
    r = await act({ actions: [{ op: 'click', x, y }, { op: 'key', chord: ['ctrl', 'v'] }] });
    assert.equal(r.status, 200, r.text);
    await waitFor(async () => (await page.evaluate(() => document.getElementById('t').value)) === text,
                  { what: 'the paste' });

    // Copied in the page: the API reads what the page put there.
    const copied = 'copied in the page ✓ 日本';
    await page.evaluate((v) => {
      const t = document.getElementById('t');
      t.value = v;
      t.focus();
      t.select();
    }, copied);
    r = await act({ op: 'key', chord: ['ctrl', 'c'] });
    assert.equal(r.status, 200, r.text);
    await waitFor(async () => (await ctx.server.api('GET', `/v1/sessions/${s.id}/clipboard`))
      .json.text === copied, { what: 'the copy' });

    r = await ctx.server.api('PUT', `/v1/sessions/${s.id}/clipboard`,
                             { text: 'x'.repeat(256 * 1024 + 1) });
    assert.equal(r.status, 413, r.text);
    assert.equal(r.json.error.code, 'clipboard_too_large');
    r = await ctx.server.api('PUT', `/v1/sessions/${s.id}/clipboard`, { text: 5 });
    assert.equal(r.status, 400, r.text);
    r = await ctx.server.api('GET', `/v1/sessions/${s.id}/clipboard`);
    assert.equal(r.json.text, copied, 'a refused PUT changes nothing');
  });

  test('an events client that never reads is cut off; nothing queues for it', async () => {
    const sock = net.connect(ctx.server.port, '127.0.0.1');
    await new Promise((resolve) => sock.once('connect', resolve));
    sock.write(`GET /v1/sessions/${s.id}/events HTTP/1.1\r\nHost: x\r\n` +
               `Authorization: Bearer ${ctx.server.key}\r\n\r\n`);
    sock.pause();  // reads nothing from now on
    const mark = ctx.server.logMark();
    const cut = () => ctx.server.logSince(mark).some((l) => /an events client read nothing/.test(l));
    // Events until the socket buffers on both sides are full and the write has waited its 10 s.
    let made = 0;
    const deadline = Date.now() + 40000;
    while (!cut() && Date.now() < deadline) {
      await control({ action: made % 2 ? 'release' : 'take' });
      made += 1;
    }
    assert.ok(cut(), `not cut off after ${made} events`);
    // What it had in its buffers, then the end, though the session still runs.
    let bytes = 0;
    sock.on('data', (d) => { bytes += d.length; });
    sock.resume();
    await new Promise((resolve) => sock.once('close', resolve));
    // Less than it was sent: the rest was never queued for it.
    assert.ok(bytes > 0 && bytes < made * 120, `${bytes} bytes of ${made} events`);
    const h = await ctx.server.api('GET', '/healthz', undefined, { key: null });
    assert.equal(h.status, 200);
    assert.equal((await ctx.server.api('GET', `/v1/sessions/${s.id}`)).json.status, 'running');
  });

  test('pause, resume and the end are events, and the stream ends with the session', async () => {
    const sse = await openSse(`${base}/v1/sessions/${s.id}/events`,
                              { authorization: `Bearer ${ctx.server.key}` });
    const since = (await ctx.server.api('GET', `/v1/sessions/${s.id}`)).json;
    assert.equal(since.status, 'running');
    assert.equal((await ctx.server.api('POST', `/v1/sessions/${s.id}/pause`)).status, 200);
    assert.equal((await ctx.server.api('POST', `/v1/sessions/${s.id}/resume`)).status, 200);
    await browser.close();
    browser = null;
    await ctx.server.deleteSession(s.id);
    await waitFor(() => sse.ended, { what: 'the stream to end with the session' });
    const types = sse.events.map((e) => e.type).filter((t) => t.startsWith('session_'));
    assert.deepEqual(types, ['session_paused', 'session_resumed', 'session_ended']);
    assert.equal(sse.events.at(-1).type, 'session_ended');
    const r = await ctx.server.api('GET', `/v1/sessions/${s.id}/events`);
    assert.equal(r.status, 404, r.text);
  });
});
