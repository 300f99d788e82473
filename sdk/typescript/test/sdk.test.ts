// The SDK against a real cabind, real sandboxes and Playwright.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

import {
  BadRequestError, Cabin, CabinError, NotFoundError, RateLimitError, type Session,
} from '../src/index.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../..');
// The integration tests' harness: a real cabind from this build.
const helpersUrl = pathToFileURL(path.join(root, 'tests/integration/helpers.mjs')).href;
// eslint-disable-next-line @typescript-eslint/no-explicit-any
let server: any;
let cabin: Cabin;

before(async () => {
  process.env.CABIN_BIN_DIR ??= path.join(root, 'build/bin');
  const { startCabind } = await import(helpersUrl);
  server = await startCabind();
  cabin = new Cabin({ baseURL: server.base, apiKey: server.key });
});

after(async () => {
  await server?.stop();
});

describe('the TypeScript SDK', () => {
  test('`await using` deletes the session at the end of its block', async () => {
    let id = '';
    {
      await using s = await cabin.sessions.create({ resolution: { width: 1024, height: 768 } });
      id = s.id;
      assert.match(id, /^ses_[a-z0-9]{20}$/);
      assert.equal(s.info.status, 'running');
      assert.match(s.cdpUrl, /^ws:\/\/.*\/cdp\?token=/);
      assert.ok((await cabin.sessions.list()).some((x) => x.id === id));
    }
    const after = await server.api('GET', `/v1/sessions/${id}`);
    assert.equal(after.json.status, 'ended', 'the block\'s end deleted it');
    assert.equal(after.json.end_reason, 'deleted');
  });

  test('connectPlaywright, computer, screenshot, exec and previews', async () => {
    await using s = await cabin.sessions.create({ resolution: { width: 1024, height: 768 } });
    const browser = await s.connectPlaywright();
    try {
      const page = browser.contexts()[0].pages()[0];
      await page.setContent('<title>sdk</title><input id=q autofocus>');
      await page.bringToFront();
      await page.focus('#q');
      const r = await s.computer({ action: 'type', text: 'typed by the sdk' } as never);
      assert.deepEqual(r.results, [{ op: 'type' }]);
      // Input reaches the page a moment after the API answers.
      await page.waitForFunction(
        () => (document.querySelector('#q') as HTMLInputElement).value === 'typed by the sdk',
        null, { timeout: 10_000 });
      assert.equal(await page.inputValue('#q'), 'typed by the sdk');
    } finally {
      await browser.close();
    }
    const png = await s.screenshot();
    assert.deepEqual([...png.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
    const ex = await s.exec(['sh', '-c', 'echo hi; exit 3']);
    assert.equal(ex.exit_code, 3);
    assert.equal(ex.stdout, 'hi\n');
    const p = await s.previews.open(8000, { ttlS: 60 });
    assert.equal(p.port, 8000);
    assert.deepEqual((await s.previews.list()).map((x) => x.id), [p.id]);
    await s.previews.delete(p.id);
    assert.deepEqual(await s.previews.list(), []);
    const t = await s.token('view', 30);
    assert.match(t.live_view_url ?? '', /\/live\?token=/);
  });

  test('files, downloads, the clipboard, the input lock and the event stream', async () => {
    await using s = await cabin.sessions.create({});
    const ac = new AbortController();
    const seen: string[] = [];
    const reading = (async () => {
      for await (const e of s.events({ since: 0, signal: ac.signal })) {
        seen.push(e.type);
        if (e.type === 'control_released') ac.abort();
      }
    })();
    const stored = await s.files.write('/tmp/sdk.txt', 'from the sdk');
    assert.equal(stored.size, 12);
    assert.equal(new TextDecoder().decode(await s.files.read('/tmp/sdk.txt')), 'from the sdk');
    assert.ok((await s.files.list('/tmp')).some((e) => e.name === 'sdk.txt'));
    await s.files.remove('/tmp/sdk.txt');
    await assert.rejects(s.files.read('/tmp/sdk.txt'),
                         (err: unknown) => err instanceof NotFoundError && err.code === 'file_not_found');
    assert.deepEqual(await s.downloads(), []);
    await s.setClipboard('naïve 🙂');
    assert.equal(await s.getClipboard(), 'naïve 🙂');
    assert.equal((await s.takeControl(60)).holder, 'admin');
    await assert.rejects(s.computer({ action: 'type', text: 'x' } as never),
                         (err: unknown) => err instanceof CabinError && err.code === 'human_in_control');
    assert.equal((await s.releaseControl()).held, false);
    await reading;
    assert.deepEqual(seen.filter((t) => t.startsWith('control_')), ['control_taken', 'control_released']);
  });

  test('errors are typed by status and carry the server\'s code', async () => {
    await assert.rejects(cabin.sessions.create({ resolution: { width: 1, height: 1 } }),
      (err: unknown) => err instanceof BadRequestError && err.status === 400 &&
        err.code === 'invalid_request' && /resolution/.test(err.message));
    await assert.rejects(cabin.sessions.get('ses_00000000000000000000'),
      (err: unknown) => err instanceof NotFoundError && err.code === 'session_not_found');
    const wrongKey = new Cabin({ baseURL: server.base, apiKey: 'nope' });
    await assert.rejects(wrongKey.sessions.list(),
      (err: unknown) => err instanceof CabinError && err.status === 401 && err.code === 'unauthenticated');
  });

  test('a 429 is retried after the Retry-After the server gives', async () => {
    const key = await server.api('POST', '/v1/keys', {
      name: 'sdk-retry', max_sessions: 1, max_creates_per_minute: 10,
    });
    assert.equal(key.status, 201, key.text);
    let attempts = 0;
    const counting: typeof fetch = (input, init) => {
      attempts += 1;
      return fetch(input, init);
    };
    const tenant = new Cabin({ baseURL: server.base, apiKey: key.json.key, fetch: counting });
    // The tenant's one session ends by itself in 3 s: the quota's Retry-After says when.
    const first = await tenant.sessions.create({ timeout_s: 3 });
    const noRetry = new Cabin({ baseURL: server.base, apiKey: key.json.key, maxRetries: 0 });
    await assert.rejects(noRetry.sessions.create({}), (err: unknown) =>
      err instanceof RateLimitError && err.code === 'quota_sessions' &&
      err.retryAfterS !== null && err.retryAfterS >= 1 && err.retryAfterS <= 3);
    attempts = 0;
    const started = Date.now();
    const second: Session = await tenant.sessions.create({}, {});
    assert.ok(attempts >= 2, `the create was retried (${attempts} attempts)`);
    assert.ok(Date.now() - started >= 1000, 'it waited for Retry-After');
    assert.notEqual(second.id, first.id);
    assert.equal((await server.api('GET', `/v1/sessions/${first.id}`)).json.end_reason, 'timeout');
    await second.delete();
  });
});
