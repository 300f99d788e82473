// Session lifecycle against a real cabind: create, drive with Playwright and Puppeteer at once,
// discovery, raw CDP, exec inside the sandbox, start_url, timeout, DELETE; and that every ending
// leaves nothing behind on the host.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';
import puppeteer from 'puppeteer-core';

import {
  Cdp,
  SESSION_ID_RE,
  leftovers,
  pngSize,
  useCabind,
  waitFor,
  waitForNoLeftovers,
  withDeadline,
  wsOpen,
} from './helpers.mjs';

const ctx = useCabind();
const WIDTH = 1024;
const HEIGHT = 700;

// Every http(s)/ws(s) address with a port that a discovery document mentions.
function addressesIn(text) {
  return [...text.matchAll(/(?:127\.0\.0\.1|localhost|\[::1\]):\d+/g)].map((m) => m[0]);
}

describe('a running session', () => {
  let s;
  before(async () => {
    s = await ctx.server.createSession({ resolution: { width: WIDTH, height: HEIGHT } });
  });
  after(async () => {
    if (s) await ctx.server.api('DELETE', `/v1/sessions/${s.id}`);
  });

  test('create answers with the documented fields', async () => {
    const { base, hostPort } = ctx.server;
    assert.match(s.id, SESSION_ID_RE);
    assert.equal(s.status, 'running');
    assert.equal(s.driver, 'namespace');
    assert.deepEqual(s.resolution, { width: WIDTH, height: HEIGHT });
    assert.equal(s.start_url, 'about:blank');
    assert.equal(s.timeout_s, 3600);
    const created = Date.parse(s.created_at);
    const expires = Date.parse(s.expires_at);
    assert.ok(Number.isFinite(created), `created_at ${s.created_at}`);
    assert.match(s.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    assert.ok(Math.abs(created - Date.now()) < 60000, 'created_at is now');
    assert.equal(expires - created, 3600 * 1000);
    const cdp = new URL(s.cdp_url);
    assert.equal(cdp.protocol, 'ws:');
    assert.equal(cdp.host, hostPort);
    assert.equal(cdp.pathname, `/v1/sessions/${s.id}/cdp`);
    assert.ok(cdp.searchParams.get('token'), 'cdp_url carries a token');
    assert.equal(s.json_version_url, `${base}/v1/sessions/${s.id}/json/version`);

    const got = await ctx.server.api('GET', `/v1/sessions/${s.id}`);
    assert.equal(got.status, 200);
    assert.equal(got.json.id, s.id);
    assert.equal(got.json.status, 'running');
    assert.ok(got.json.cdp_url.startsWith(`ws://${hostPort}/v1/sessions/${s.id}/cdp?token=`));

    const list = await ctx.server.api('GET', '/v1/sessions');
    assert.equal(list.status, 200);
    assert.ok(list.json.sessions.some((x) => x.id === s.id && x.status === 'running'));

    const info = await ctx.server.api('GET', '/v1/info');
    assert.equal(info.status, 200);
    assert.ok(info.json.sessions.live >= 1);
  });

  test('Playwright and Puppeteer drive the same browser at once', async () => {
    const pw = await chromium.connectOverCDP(s.cdp_url, { timeout: 20000 });
    let pp;
    try {
      const context = pw.contexts()[0];
      assert.ok(context, 'a default browser context');
      const page = context.pages()[0] ?? (await context.newPage());
      await page.setContent('<title>cabin-shared</title><h1>hi</h1>');
      assert.equal(await page.evaluate(() => 6 * 7), 42);
      assert.equal(await page.textContent('h1'), 'hi');

      const [iw, ih, dpr, sw, sh] = await page.evaluate(() => [
        innerWidth, innerHeight, devicePixelRatio, screen.width, screen.height,
      ]);
      assert.deepEqual([sw, sh], [WIDTH, HEIGHT], 'the X screen has the asked resolution');
      assert.ok(Math.abs(iw - WIDTH) <= 16, `innerWidth ${iw} ≈ ${WIDTH}`);
      assert.ok(ih > HEIGHT - 200 && ih <= HEIGHT, `innerHeight ${ih} fits in ${HEIGHT}`);
      const png = await page.screenshot();
      assert.deepEqual(pngSize(png), {
        width: Math.round(iw * dpr),
        height: Math.round(ih * dpr),
      });

      pp = await puppeteer.connect({
        browserWSEndpoint: s.cdp_url,
        defaultViewport: null,
        protocolTimeout: 20000,
      });
      const pages = await pp.pages();
      const titles = await Promise.all(pages.map((p) => p.title()));
      const shared = pages[titles.indexOf('cabin-shared')];
      assert.ok(shared, `Puppeteer sees the page Playwright titled (titles: ${titles})`);
      const v = await shared.evaluate(() => {
        document.body.dataset.by = 'puppeteer';
        return 6 * 7;
      });
      assert.equal(v, 42);
      assert.equal(await page.evaluate(() => document.body.dataset.by), 'puppeteer');
    } finally {
      if (pp) await pp.disconnect();
      await pw.close();
    }

    // Clients going away leave the browser running.
    const again = await chromium.connectOverCDP(s.cdp_url, { timeout: 20000 });
    try {
      const page = again.contexts()[0].pages().find((p) => p.url().startsWith('about:'));
      assert.ok(page, 'the page is still there');
      assert.equal(await page.title(), 'cabin-shared');
    } finally {
      await again.close();
    }
  });

  test('Playwright connects through HTTP discovery with the API key', async () => {
    const { base, key } = ctx.server;
    const browser = await chromium.connectOverCDP(`${base}/v1/sessions/${s.id}`, {
      headers: { Authorization: `Bearer ${key}` },
      timeout: 20000,
    });
    try {
      const page = await browser.contexts()[0].newPage();
      await page.goto('data:text/html,<title>via-discovery</title><p>ok</p>');
      assert.equal(await page.title(), 'via-discovery');
      assert.equal(await page.evaluate(() => 1 + 1), 2);
      await page.close();
    } finally {
      await browser.close();
    }
  });

  test('discovery documents point at cabind and their WebSocket URLs work', async () => {
    const { hostPort } = ctx.server;
    const version = await ctx.server.api('GET', `/v1/sessions/${s.id}/json/version`);
    assert.equal(version.status, 200);
    assert.ok(version.json.Browser, 'json/version names the browser');
    const vurl = new URL(version.json.webSocketDebuggerUrl);
    assert.equal(vurl.host, hostPort);
    assert.equal(vurl.pathname, `/v1/sessions/${s.id}/cdp`);
    assert.deepEqual([...new Set(addressesIn(version.text))], [hostPort]);

    // With only the token from cdp_url (no API key), as a client handed just the URL would.
    const token = new URL(s.cdp_url).searchParams.get('token');
    const list = await ctx.server.api(
      'GET', `/v1/sessions/${s.id}/json/list?token=${encodeURIComponent(token)}`, undefined,
      { key: null });
    assert.equal(list.status, 200, list.text);
    assert.ok(Array.isArray(list.json));
    const pages = list.json.filter((t) => t.type === 'page');
    assert.ok(pages.length >= 1, `page targets in ${list.text}`);
    for (const t of pages) {
      const u = new URL(t.webSocketDebuggerUrl);
      assert.equal(u.host, hostPort, `${t.webSocketDebuggerUrl} points at cabind`);
      assert.equal(u.pathname, `/v1/sessions/${s.id}/devtools/page/${t.id}`);
    }
    for (const addr of addressesIn(list.text)) {
      assert.equal(addr, hostPort, `no address inside the sandbox leaks out (${addr})`);
    }
    const bare = await ctx.server.api('GET', `/v1/sessions/${s.id}/json`);
    assert.equal(bare.status, 200);
    assert.ok(Array.isArray(bare.json));

    const cdp = await Cdp.connect(pages[0].webSocketDebuggerUrl);
    try {
      const r = await cdp.send('Runtime.evaluate', { expression: '6*7', returnByValue: true });
      assert.equal(r.result.value, 42);
    } finally {
      await cdp.close();
    }
  });

  test('raw CDP on the browser target: version and flat target sessions', async () => {
    const cdp = await Cdp.connect(s.cdp_url);
    try {
      const v = await cdp.send('Browser.getVersion');
      assert.match(v.product, /Chrome/);
      const { targetInfos } = await cdp.send('Target.getTargets');
      const page = targetInfos.find((t) => t.type === 'page');
      assert.ok(page);
      const { sessionId } = await cdp.send('Target.attachToTarget', {
        targetId: page.targetId, flatten: true,
      });
      const r = await cdp.send(
        'Runtime.evaluate', { expression: '"x".repeat(3)', returnByValue: true }, sessionId);
      assert.equal(r.result.value, 'xxx');
      // A message far above a typical frame size passes intact both ways.
      const big = 'y'.repeat(4 << 20);
      const echo = await cdp.send(
        'Runtime.evaluate', { expression: `(${JSON.stringify(big)}).length`, returnByValue: true },
        sessionId);
      assert.equal(echo.result.value, big.length);
      const back = await cdp.send(
        'Runtime.evaluate', { expression: `"z".repeat(${3 << 20})`, returnByValue: true },
        sessionId);
      assert.equal(back.result.value.length, 3 << 20);
    } finally {
      await cdp.close();
    }
  });

  test('exec runs inside the sandbox, whose network has only loopback', async () => {
    const r = await ctx.server.api('POST', `/v1/sessions/${s.id}/exec`, {
      argv: ['sh', '-c', 'echo hi; id -u; cat /proc/net/dev; ls /'],
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.exit_code, 0, r.text);
    assert.equal(r.json.signal, null);
    assert.equal(r.json.timed_out, false);
    assert.equal(r.json.stdout_truncated, false);
    assert.equal(typeof r.json.duration_ms, 'number');
    const lines = r.json.stdout.split('\n');
    assert.equal(lines[0], 'hi');
    assert.match(lines[1], /^\d+$/, 'id -u prints a number');
    const ifaces = lines
      .map((l) => /^\s*([^\s:|]+):/.exec(l)?.[1])
      .filter(Boolean);
    assert.deepEqual(ifaces, ['lo'], `only lo in the sandbox's network namespace:\n${r.json.stdout}`);
    assert.ok(lines.includes('usr'), 'ls / shows usr');
  });

  test('exec: /usr is read-only', async () => {
    assert.equal(fs.existsSync('/usr/x'), false);
    const touch = await ctx.server.api('POST', `/v1/sessions/${s.id}/exec`, {
      argv: ['touch', '/usr/x'],
    });
    assert.equal(touch.status, 200, touch.text);
    assert.notEqual(touch.json.exit_code, 0, 'touch /usr/x fails');
    assert.match(touch.json.stderr, /read-only|permission denied/i);
    assert.equal(fs.existsSync('/usr/x'), false, 'nothing appeared on the host');
  });

  test('exec: stdin, env, cwd and the exit code', async () => {
    const echo = await ctx.server.api('POST', `/v1/sessions/${s.id}/exec`, {
      argv: ['sh', '-c', 'cat; echo "$K"; pwd; exit 3'],
      stdin: 'from-stdin\n', env: { K: 'V' }, cwd: '/tmp',
    });
    assert.equal(echo.status, 200, echo.text);
    assert.equal(echo.json.exit_code, 3);
    assert.equal(echo.json.stdout, 'from-stdin\nV\n/tmp\n');
  });

  test('exec: output is cut at max_output_bytes and says so', async () => {
    const r = await ctx.server.api('POST', `/v1/sessions/${s.id}/exec`, {
      argv: ['sh', '-c', 'head -c 100000 /dev/zero | tr "\\0" a; echo err >&2'],
      max_output_bytes: 1000,
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.exit_code, 0);
    assert.equal(r.json.stdout, 'a'.repeat(1000));
    assert.equal(r.json.stdout_truncated, true);
    assert.equal(r.json.stderr, 'err\n');
    assert.equal(r.json.stderr_truncated, false);
  });

  test('exec: a command past timeout_ms is killed', async () => {
    const slow = await ctx.server.api('POST', `/v1/sessions/${s.id}/exec`, {
      argv: ['sleep', '30'], timeout_ms: 300,
    });
    assert.equal(slow.status, 200, slow.text);
    assert.equal(slow.json.timed_out, true);
    assert.ok(slow.json.duration_ms < 10000);
  });

  test('exec: a command killed by a signal reports it', async () => {
    const r = await ctx.server.api('POST', `/v1/sessions/${s.id}/exec`, {
      argv: ['sh', '-c', 'kill -KILL $$'],
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.signal, 9);
    assert.equal(r.json.timed_out, false);
  });

  test('exec: a program that cannot start is 400 spawn_failed', async () => {
    const missing = await ctx.server.api('POST', `/v1/sessions/${s.id}/exec`, {
      argv: ['/no/such/program'],
    });
    assert.equal(missing.status, 400, missing.text);
    assert.equal(missing.json?.error?.code, 'spawn_failed');
  });

  test('exec: no secret reaches the sandbox, not even in /proc/*/environ', async () => {
    // Every process the sandbox's user can see, including the agent's own start-up environment.
    const r = await ctx.server.api('POST', `/v1/sessions/${s.id}/exec`, {
      argv: ['sh', '-c',
             'env | sed "s/^/env: /"; for f in /proc/[0-9]*/environ; do ' +
             'tr "\\0" "\\n" < "$f" 2>/dev/null | sed "s|^|$f: |"; done'],
    });
    assert.equal(r.status, 200, r.text);
    assert.match(r.json.stdout, /^env: /m, 'the probe read its own environment');
    const leaks = r.json.stdout.split('\n')
      .filter((l) => /CABIN_AGENT_SECRET|CABIN_API_KEY/.test(l) || l.includes(ctx.server.key));
    assert.deepEqual(leaks, [], 'secrets readable inside the sandbox');
  });
});

test('start_url is the first page the browser shows', async () => {
  const url = 'data:text/html,<title>cabin-start-url</title><p>start</p>';
  const s = await ctx.server.createSession({ start_url: url });
  try {
    assert.equal(s.start_url, url);
    const title = await waitFor(
      async () => {
        const r = await ctx.server.api('GET', `/v1/sessions/${s.id}/json/list`);
        const page = (r.json || []).find((t) => t.type === 'page');
        return page?.title === 'cabin-start-url' ? page.title : null;
      },
      { timeoutMs: 15000, what: 'the start page title' },
    );
    assert.equal(title, 'cabin-start-url');
  } finally {
    await ctx.server.deleteSession(s.id);
  }
  await waitForNoLeftovers(s.id, ctx.server.runDir);
});

test('a session with timeout_s ends on its own and leaves nothing', async () => {
  // The lifetime counts from the request in whole seconds: enough of it must be left after 201.
  const s = await ctx.server.createSession({ timeout_s: 6 });
  assert.equal(s.timeout_s, 6);
  assert.equal(Date.parse(s.expires_at) - Date.parse(s.created_at), 6000);
  assert.ok(leftovers(s.id, ctx.server.runDir).length > 0, 'a live session is visible on the host');
  const cdp = await Cdp.connect(s.cdp_url);
  const ended = await waitFor(
    async () => {
      const r = await ctx.server.api('GET', `/v1/sessions/${s.id}`);
      return r.json?.status === 'ended' ? r.json : null;
    },
    { timeoutMs: 20000, intervalMs: 200, what: 'the session to end by timeout' },
  );
  assert.equal(ended.end_reason, 'timeout');
  assert.ok(Date.parse(ended.ended_at) >= Date.parse(s.created_at) + 6000 - 1000);
  assert.equal(ended.cdp_url, undefined, 'an ended session has no cdp_url');
  await withDeadline(cdp.closed, 10000, 'the open CDP connection to close at the timeout');
  await waitForNoLeftovers(s.id, ctx.server.runDir);
});

test('DELETE ends the session, closes CDP, refuses the old URL, leaves nothing', async () => {
  // An empty body takes every default.
  const created = await ctx.server.api('POST', '/v1/sessions');
  assert.equal(created.status, 201, created.text);
  const s = created.json;
  ctx.sessions.add(s.id);
  assert.deepEqual(s.resolution, { width: 1280, height: 800 });
  const cdp = await Cdp.connect(s.cdp_url);
  assert.ok((await cdp.send('Browser.getVersion')).product);
  const found = leftovers(s.id, ctx.server.runDir);
  assert.ok(found.some((l) => l.startsWith('process')), `sandbox processes visible: ${found}`);

  const del = await ctx.server.api('DELETE', `/v1/sessions/${s.id}`);
  assert.equal(del.status, 200, del.text);
  assert.equal(del.json.id, s.id);
  assert.equal(del.json.status, 'ended');
  assert.equal(del.json.end_reason, 'deleted');
  assert.ok(Number.isFinite(Date.parse(del.json.ended_at)));

  await withDeadline(cdp.closed, 10000, 'the open CDP connection to close on DELETE');
  await waitForNoLeftovers(s.id, ctx.server.runDir);

  await assert.rejects(wsOpen(s.cdp_url), (err) => {
    assert.ok([401, 404, 410].includes(err.status), `old cdp_url refused, got ${err.message}`);
    assert.ok(err.json?.error?.code, 'with a JSON error');
    return true;
  });

  const got = await ctx.server.api('GET', `/v1/sessions/${s.id}`);
  assert.equal(got.status, 200);
  assert.equal(got.json.status, 'ended');
  assert.equal(got.json.end_reason, 'deleted');

  const again = await ctx.server.api('DELETE', `/v1/sessions/${s.id}`);
  assert.equal(again.status, 200);
  assert.deepEqual(again.json, del.json, 'deleting again answers the same record');

  const live = await ctx.server.api('GET', '/v1/sessions');
  assert.ok(!live.json.sessions.some((x) => x.id === s.id), 'not among live sessions');
  const all = await ctx.server.api('GET', '/v1/sessions?all=1');
  assert.ok(all.json.sessions.some((x) => x.id === s.id && x.status === 'ended'));

  const exec = await ctx.server.api('POST', `/v1/sessions/${s.id}/exec`, { argv: ['true'] });
  assert.ok(exec.status >= 400 && exec.status < 500, `exec on an ended session: ${exec.status}`);
  assert.ok(exec.json?.error?.code);
});

describe('sandbox output', () => {
  test('GET /logs shows the sandbox output, live and after the end', async () => {
    const s = await ctx.server.createSession({});
    const live = await ctx.server.api('GET', `/v1/sessions/${s.id}/logs`);
    assert.equal(live.status, 200, live.text);
    assert.equal(live.json.live, true);
    assert.ok(live.json.lines.some((l) => /ready after \d+ ms/.test(l)),
              live.json.lines.slice(-5).join('\n'));
    assert.equal((await ctx.server.api('DELETE', `/v1/sessions/${s.id}`)).status, 200);
    const ended = await ctx.server.api('GET', `/v1/sessions/${s.id}/logs`);
    assert.equal(ended.status, 200, ended.text);
    assert.equal(ended.json.live, false);
    assert.ok(ended.json.lines.some((l) => /ready after \d+ ms/.test(l)));
    const unknown = await ctx.server.api('GET', '/v1/sessions/ses_00000000000000000000/logs');
    assert.equal(unknown.status, 404);
  });
});
