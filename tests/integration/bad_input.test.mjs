// Hostile and malformed input against a real cabind: every bad request gets the documented status
// and a JSON error, no capability token works beyond its session, and the server keeps serving.
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';

import { Cdp, rawHttp, useCabind, waitForNoLeftovers, wsOpen } from './helpers.mjs';

const ctx = useCabind();
const FAKE_ID = 'ses_00000000000000000000';

function assertError(r, status, code, what = '') {
  assert.equal(r.status, status, `${what} -> ${r.status} ${r.text?.slice(0, 300)}`);
  assert.ok(r.json && typeof r.json.error === 'object', `${what}: a JSON error body (${r.text?.slice(0, 200)})`);
  assert.equal(typeof r.json.error.message, 'string');
  if (code) {
    const codes = Array.isArray(code) ? code : [code];
    assert.ok(codes.includes(r.json.error.code), `${what}: code ${r.json.error.code}, want ${codes}`);
  }
}

function tokenOf(url) {
  return new URL(url).searchParams.get('token');
}

function withToken(url, token) {
  const u = new URL(url);
  if (token === null) u.searchParams.delete('token');
  else u.searchParams.set('token', token);
  return u.toString();
}

// Changes the first character of the signature part: the payload stays valid, the MAC does not.
function forge(token) {
  const dot = token.indexOf('.');
  assert.ok(dot > 0, `token has a payload and a signature: ${token}`);
  const c = token[dot + 1];
  return token.slice(0, dot + 1) + (c === 'A' ? 'B' : 'A') + token.slice(dot + 2);
}

async function assertUpgradeRefused(url, statuses, what, opts) {
  await assert.rejects(wsOpen(url, opts), (err) => {
    assert.ok(err.status, `${what}: refused with an HTTP status, got ${err.message}`);
    assert.ok(statuses.includes(err.status), `${what}: status ${err.status}, want ${statuses}`);
    assert.ok(err.json?.error?.code, `${what}: a JSON error (${err.body})`);
    return true;
  }, what);
}

describe('control API input', () => {
  const post = (body, opts) => ctx.server.api('POST', '/v1/sessions', body, opts);

  test('malformed JSON is 400 invalid_json', async () => {
    assertError(await post('{"resolution":'), 400, 'invalid_json', 'truncated JSON');
    assertError(await post('{"a":1,}'), 400, 'invalid_json', 'trailing comma');
    assertError(await post(Buffer.from([0xff, 0xfe, 0x7b])), 400, 'invalid_json', 'not UTF-8');
  });

  test('JSON that is not an object is 400', async () => {
    for (const body of ['[]', '"x"', '42', 'null']) {
      assertError(await post(body), 400, ['invalid_request', 'invalid_json'], body);
    }
  });

  test('unknown fields are 400 unknown_field, at the top and nested', async () => {
    assertError(await post({ resolutoin: { width: 1280, height: 800 } }), 400, 'unknown_field');
    assertError(await post({ resolution: { width: 1280, height: 800, depth: 24 } }), 400,
                'unknown_field', 'nested');
    const exec = await ctx.server.api('POST', `/v1/sessions/${FAKE_ID}/exec`, { argv: ['true'], x: 1 });
    assert.ok([400, 404].includes(exec.status), `exec with unknown field -> ${exec.status}`);
  });

  test('out-of-range and wrongly typed values are 400 invalid_request', async () => {
    const bad = [
      { resolution: { width: 0, height: 0 } },
      { resolution: { width: 100000, height: 100000 } },
      { resolution: { width: 199, height: 800 } },
      { resolution: { width: 1280, height: 7681 } },
      { resolution: { width: -1280, height: 800 } },
      { resolution: { width: 1280.5, height: 800 } },
      { resolution: { width: '1280', height: 800 } },
      { resolution: [1280, 800] },
      { timeout_s: 0 },
      { timeout_s: -5 },
      { timeout_s: 1e12 },
      { timeout_s: '60' },
      { start_url: 'javascript:alert(1)' },
      { start_url: 'file:///etc/passwd' },
      { start_url: 'chrome://settings' },
      { start_url: 'not a url' },
      { start_url: 42 },
      { driver: 7 },
    ];
    for (const body of bad) {
      assertError(await post(body), 400, ['invalid_request', 'unknown_field'], JSON.stringify(body));
    }
    // Boundaries that are allowed are not refused for the wrong reason.
    const huge = await post('{"timeout_s": 1' + '0'.repeat(400) + '}');
    assertError(huge, 400, ['invalid_request', 'invalid_json'], 'a 400-digit number');
  });

  test('a very long start_url is honoured or refused as invalid, never a server error', async () => {
    // 300 KB: longer than one execve argument may be (128 KiB on Linux).
    const url = `data:text/html,<title>long</title>${'a'.repeat(300 << 10)}`;
    const r = await post({ start_url: url });
    if (r.status === 201) {
      ctx.sessions.add(r.json.id);
      await ctx.server.deleteSession(r.json.id);
      await waitForNoLeftovers(r.json.id, ctx.server.runDir);
    } else {
      assertError(r, 400, 'invalid_request', 'a 300 KB start_url');
    }
  });

  test('a screen a screenshot cannot serve is refused; so is an image past the limit', async () => {
    const big = await post({ resolution: { width: 7680, height: 7680 } });
    assertError(big, 400, 'invalid_request', '7680x7680');
    assert.match(big.json.error.message, /^resolution: at most 33554432 pixels/);
    const s = await ctx.server.createSession({ resolution: { width: 640, height: 480 } });
    try {
      const shot = await ctx.server.api('GET',
        `/v1/sessions/${s.id}/screenshot?width=16384&height=16384`);
      assertError(shot, 400, 'bad_query', 'a 16384x16384 screenshot');
      assert.match(shot.json.error.message, /exceed 33554432 pixels/);
    } finally {
      await ctx.server.deleteSession(s.id);
    }
  });

  test('an unknown driver is 400 unknown_driver', async () => {
    assertError(await post({ driver: 'no-such-driver' }), 400, 'unknown_driver');
  });

  test('an allow rule for a range this cabind keeps closed is 400, naming the option', async () => {
    for (const [cidr, flag] of [['127.0.0.1/32', '--egress-allow-host-cidr 127.0.0.1/32'],
                                ['10.0.0.0/8', '--egress-allow-cidr 10.0.0.0/8']]) {
      const r = await post({ network: { mode: 'allowlist', allow: [{ cidr }] } });
      assertError(r, 400, 'invalid_request', cidr);
      assert.match(r.json.error.message, /network\.allow\[0\]: \S+ can never match/);
      assert.ok(r.json.error.message.includes(flag), r.json.error.message);
    }
    // A public range is a rule like any other.
    const ok = await post({ network: { mode: 'allowlist', allow: [{ cidr: '203.0.113.0/24' }] } });
    assert.equal(ok.status, 201, ok.text);
    await ctx.server.deleteSession(ok.json.id);
  });

  test('a missing or wrong API key is 401 with a JSON body, before any other check', async () => {
    const { key } = ctx.server;
    assertError(await ctx.server.api('GET', '/v1/sessions', undefined, { key: null }), 401,
                'unauthenticated', 'no key');
    const wrong = (key[0] === 'a' ? 'b' : 'a') + key.slice(1);
    assertError(await ctx.server.api('GET', '/v1/sessions', undefined, { key: wrong }), 401,
                'unauthenticated', 'wrong key');
    assertError(await ctx.server.api('GET', '/v1/info', undefined, { key: key.slice(0, -1) }), 401,
                'unauthenticated', 'key prefix');
    assertError(await ctx.server.api('GET', '/v1/info', undefined, { key: key + 'x' }), 401,
                'unauthenticated', 'key with a suffix');
    assertError(await ctx.server.api('GET', '/v1/info', undefined,
                                     { key: null, headers: { authorization: `Basic ${key}` } }),
                401, 'unauthenticated', 'Basic scheme');
    assertError(await ctx.server.api('GET', `/v1/info?token=${key}`, undefined, { key: null }),
                401, null, 'API key as a query token');
    // Without a key nothing is parsed and nothing is revealed about sessions.
    assertError(await ctx.server.api('POST', '/v1/sessions', '{"broken', { key: null }), 401,
                'unauthenticated', 'bad JSON without a key');
    assertError(await ctx.server.api('GET', `/v1/sessions/${FAKE_ID}`, undefined, { key: null }),
                401, 'unauthenticated', 'unknown session without a key');
    assertError(await ctx.server.api('DELETE', `/v1/sessions/${FAKE_ID}`, undefined, { key: null }),
                401, 'unauthenticated', 'DELETE without a key');
  });

  test('the usual slips with a key are 401s that name the fix', async () => {
    const { key } = ctx.server;
    const bare = await ctx.server.api('GET', '/v1/sessions', undefined,
                                      { key: null, headers: { authorization: key } });
    assertError(bare, 401, 'unauthenticated', 'a key without Bearer');
    assert.match(bare.json.error.message, /"Bearer " is missing before the key/);
    const s = await ctx.server.createSession();
    try {
      const token = new URL(s.cdp_url).searchParams.get('token');
      const asKey = await ctx.server.api('GET', '/v1/sessions', undefined, { key: token });
      assertError(asKey, 401, 'unauthenticated', 'a token as a key');
      assert.match(asKey.json.error.message, /capability token, not an API key.*token= query/);
      const wrong = await ctx.server.api('GET', '/v1/sessions', undefined,
                                         { key: (key[0] === 'a' ? 'b' : 'a') + key.slice(1) });
      assert.equal(wrong.json.error.message, 'the API key is not valid');
    } finally {
      await ctx.server.deleteSession(s.id);
    }
  });

  test('unknown sessions and unknown paths are 404', async () => {
    for (const [m, p] of [
      ['GET', `/v1/sessions/${FAKE_ID}`],
      ['DELETE', `/v1/sessions/${FAKE_ID}`],
      ['GET', `/v1/sessions/${FAKE_ID}/json/version`],
      ['GET', `/v1/sessions/${FAKE_ID}/json/list`],
    ]) {
      assertError(await ctx.server.api(m, p), 404, 'session_not_found', `${m} ${p}`);
    }
    assertError(await ctx.server.api('POST', `/v1/sessions/${FAKE_ID}/exec`, { argv: ['true'] }),
                404, 'session_not_found', 'exec on an unknown session');
    for (const id of ['ses_ABCDEFGHIJKLMNOPQRST', 'ses_0000', 'xyz', 'ses_00000000000000000000x']) {
      assertError(await ctx.server.api('GET', `/v1/sessions/${id}`), 404,
                  ['session_not_found', 'not_found'], id);
    }
    assertError(await ctx.server.api('GET', '/v1/nothing'), 404, 'not_found');
    assertError(await ctx.server.api('GET', '/nothing'), 404, 'not_found');
    assertError(await ctx.server.api('GET', '/ui/nothing.js'), 404, 'not_found');
  });

  test('paths with dot segments or encoded tricks are 404, sent raw', async () => {
    const { port, key } = ctx.server;
    for (const target of [
      '/v1/sessions/../info',
      '/v1/./info',
      '/v1/sessions/%2e%2e/info',
      `/v1/sessions/${FAKE_ID}/../../info`,
      '//v1/info',
      '/v1//info',
      '/v1/info%00',
      '/v1/sessions/ses_%30000000000000000000',
    ]) {
      const r = await rawHttp(port,
        `GET ${target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nConnection: close\r\n\r\n`);
      assertError(r, 404, ['not_found', 'session_not_found'], target);
    }
  });

  test('a 1 MB session id is 414 or 431 with a JSON body', async () => {
    const { port, key } = ctx.server;
    const target = `/v1/sessions/ses_${'a'.repeat(1 << 20)}`;
    const r = await rawHttp(port,
      `GET ${target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nConnection: close\r\n\r\n`);
    assert.ok([414, 431].includes(r.status), `status ${r.status}`);
    assertError(r, r.status, ['uri_too_long', 'headers_too_large']);
  });

  test('headers over 16 KiB are 431 with a JSON body', async () => {
    const { port, key } = ctx.server;
    const r = await rawHttp(port,
      `GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n` +
      `X-Big: ${'b'.repeat(20 << 10)}\r\nConnection: close\r\n\r\n`);
    assertError(r, 431, ['headers_too_large', 'uri_too_long']);
  });

  const bigHead = (key, framing) =>
    `POST /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n` +
    `Content-Type: application/json\r\n${framing}\r\nConnection: close\r\n\r\n`;

  test('a Content-Length over 1 MiB is 413 before the body is sent', async () => {
    const { port, key } = ctx.server;
    // Only the head: the answer must not wait for (or read) a body it will refuse anyway.
    const r = await rawHttp(port, bigHead(key, `Content-Length: ${(1 << 20) + 1}`));
    assertError(r, 413, 'body_too_large', 'Content-Length over the limit');
  });

  test('a chunked body over 1 MiB is 413', async () => {
    const { port, key } = ctx.server;
    const chunk = Buffer.alloc(256 << 10, 0x20);
    const parts = [];
    for (let i = 0; i < 5; i++) {
      parts.push(Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n'));
    }
    parts.push(Buffer.from('0\r\n\r\n'));
    const r = await rawHttp(port, bigHead(key, 'Transfer-Encoding: chunked'), Buffer.concat(parts));
    assertError(r, 413, 'body_too_large', 'chunked over the limit');
  });

  test('a body just under 1 MiB is read, and judged by its content', async () => {
    const under = Buffer.concat([Buffer.from('{"start_url":"javascript:'),
                                 Buffer.alloc((1 << 20) - 64, 0x61), Buffer.from('"}')]);
    assert.ok(under.length <= 1 << 20);
    assertError(await ctx.server.api('POST', '/v1/sessions', under), 400, 'invalid_request',
                'a body just under 1 MiB');
  });

  test('fetch streaming an 8 MiB body gets the 413, not a reset', async () => {
    // The server must stop reading gracefully (answer, then drain or half-close) rather than
    // close with request bytes unread, which resets the connection under the client's feet.
    for (let i = 0; i < 5; i++) {
      let res;
      try {
        res = await ctx.server.api('POST', '/v1/sessions', Buffer.alloc(8 << 20, 0x20));
      } catch (err) {
        assert.fail(`try ${i + 1}: ${err.cause?.code || err.message} instead of 413`);
      }
      assertError(res, 413, 'body_too_large', 'fetch with an 8 MiB body');
    }
  });

  test('a wrong method is 405 method_not_allowed', async () => {
    for (const [m, p] of [
      ['PUT', '/v1/sessions'],
      ['PUT', `/v1/sessions/${FAKE_ID}`],
      ['POST', '/healthz'],
      ['DELETE', '/v1/info'],
      ['GET', `/v1/sessions/${FAKE_ID}/exec`],
    ]) {
      assertError(await ctx.server.api(m, p), 405, 'method_not_allowed', `${m} ${p}`);
    }
  });
});

describe('capability tokens on the CDP WebSocket', () => {
  let a, b;
  before(async () => {
    a = await ctx.server.createSession({});
    b = await ctx.server.createSession({});
  });

  test('the handed-out cdp_url works (control for the refusals below)', async () => {
    const cdp = await Cdp.connect(a.cdp_url);
    assert.ok((await cdp.send('Browser.getVersion')).product);
    await cdp.close();
    const viaKey = await Cdp.connect(withToken(a.cdp_url, null), {
      headers: { Authorization: `Bearer ${ctx.server.key}` },
    });
    assert.ok((await viaKey.send('Browser.getVersion')).product);
    await viaKey.close();
  });

  test('no token is 401', async () => {
    await assertUpgradeRefused(withToken(a.cdp_url, null), [401], 'no token');
    await assertUpgradeRefused(withToken(a.cdp_url, ''), [401], 'empty token');
  });

  test('a forged token is 401', async () => {
    await assertUpgradeRefused(withToken(a.cdp_url, forge(tokenOf(a.cdp_url))), [401], 'forged');
    await assertUpgradeRefused(withToken(a.cdp_url, tokenOf(a.cdp_url) + 'x'), [401], 'suffixed');
    await assertUpgradeRefused(withToken(a.cdp_url, 'x'.repeat(4096)), [401, 414, 431], 'huge');
    await assertUpgradeRefused(withToken(a.cdp_url, tokenOf(a.cdp_url).split('.')[0]), [401],
                               'payload only');
  });

  test("another session's token is 401", async () => {
    const crossed = a.cdp_url.replace(a.id, b.id);
    assert.equal(tokenOf(crossed), tokenOf(a.cdp_url));
    await assertUpgradeRefused(crossed, [401], "session A's token on session B");
    const list = await ctx.server.api(
      'GET', `/v1/sessions/${b.id}/json/list?token=${encodeURIComponent(tokenOf(a.cdp_url))}`,
      undefined, { key: null });
    assertError(list, 401, ['invalid_token', 'unauthenticated'], "A's token on B's discovery");
  });

  test('a cdp token does not open the control API', async () => {
    const t = tokenOf(a.cdp_url);
    assertError(await ctx.server.api('GET', `/v1/sessions/${a.id}?token=${encodeURIComponent(t)}`,
                                     undefined, { key: null }),
                401, null, 'token in the query of GET session');
    assertError(await ctx.server.api('DELETE', `/v1/sessions/${a.id}`, undefined, { key: t }),
                401, null, 'token as bearer on DELETE');
    assertError(await ctx.server.api('POST', `/v1/sessions/${a.id}/exec`, { argv: ['true'] },
                                     { key: t }),
                401, null, 'token as bearer on exec');
    const still = await ctx.server.api('GET', `/v1/sessions/${a.id}`);
    assert.equal(still.json.status, 'running');
  });

  test('a plain GET on a CDP endpoint is 400 websocket_required', async () => {
    const r = await ctx.server.api('GET', `/v1/sessions/${a.id}/cdp`);
    assertError(r, 400, 'websocket_required');
  });

  test("a deleted session's token is refused and an open connection closes", async () => {
    const victim = await ctx.server.createSession({});
    const cdp = await Cdp.connect(victim.cdp_url);
    await ctx.server.deleteSession(victim.id);
    await cdp.closed;
    await assertUpgradeRefused(victim.cdp_url, [401, 404, 410], 'deleted session token');
    await waitForNoLeftovers(victim.id, ctx.server.runDir);
  });

  test('after all of that the server still serves', async () => {
    const h = await ctx.server.api('GET', '/healthz', undefined, { key: null });
    assert.equal(h.status, 200);
    assert.deepEqual(h.json, { status: 'ok' });
    // The sessions made before the abuse still work.
    for (const s of [a, b]) {
      const cdp = await Cdp.connect(s.cdp_url);
      const r = await cdp.send('Target.getTargets');
      assert.ok(r.targetInfos.length >= 1);
      await cdp.close();
    }
    const fresh = await ctx.server.createSession({ resolution: { width: 800, height: 600 } });
    try {
      const list = await ctx.server.api('GET', `/v1/sessions/${fresh.id}/json/list`);
      const page = list.json.find((t) => t.type === 'page');
      const cdp = await Cdp.connect(page.webSocketDebuggerUrl);
      const r = await cdp.send('Runtime.evaluate', {
        expression: '[screen.width, screen.height]', returnByValue: true,
      });
      assert.deepEqual(r.result.value, [800, 600]);
      await cdp.close();
    } finally {
      await ctx.server.deleteSession(fresh.id);
    }
    await waitForNoLeftovers(fresh.id, ctx.server.runDir);
    for (const s of [a, b]) await ctx.server.deleteSession(s.id);
  });
});
