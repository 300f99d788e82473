// Files in and out of a sandbox, the browser's downloads, and the events of its pages: against
// a real session, with hashes of the bytes and the page itself as witnesses.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';

import { openSse, rawHttp, useCabind, waitFor } from './helpers.mjs';

const ctx = useCabind({ args: ['--max-upload-mb', '200'] });
const sha256 = (buf) => createHash('sha256').update(buf).digest('hex');

describe('files, downloads and browser events', () => {
  let s, browser, page, home, sse;
  const files = (query) => `/v1/sessions/${s.id}/files?${new URLSearchParams(query)}`;
  const auth = () => ({ authorization: `Bearer ${ctx.server.key}` });
  const exec = async (argv) => {
    const r = await ctx.server.api('POST', `/v1/sessions/${s.id}/exec`, { argv });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.exit_code, 0, r.json.stderr);
    return r.json.stdout;
  };
  const put = (p, body, headers = {}) => fetch(ctx.server.base + files({ path: p }), {
    method: 'PUT', headers: { ...auth(), ...headers }, body,
  });
  // The events seen so far of `type`, waited for until `n` have come.
  const seen = (type, n = 1) => waitFor(() => {
    const got = sse.events.filter((e) => e.type === type);
    return got.length >= n && got;
  }, { timeoutMs: 20000, what: `${n} ${type} event(s)` });

  before(async () => {
    s = await ctx.server.createSession({});
    sse = await openSse(`${ctx.server.base}/v1/sessions/${s.id}/events?since=0`, auth());
    browser = await chromium.connectOverCDP(s.cdp_url);
    page = browser.contexts()[0].pages()[0];
    home = (await exec(['sh', '-c', 'printf %s "$HOME"'])).trim();
    assert.match(home, /^\//);
  });
  after(async () => {
    sse?.close();
    await browser?.close();
  });

  test('a 100 MB upload arrives whole and comes back with the same hash', async () => {
    const data = randomBytes(100 * 1024 * 1024);
    const want = sha256(data);
    const up = await put('/tmp/big.bin', data);
    assert.equal(up.status, 200, await up.clone().text());
    assert.deepEqual(await up.json(), { path: '/tmp/big.bin', size: data.length, sha256: want });
    // The sandbox sees the same bytes.
    assert.match(await exec(['sha256sum', '/tmp/big.bin']), new RegExp(`^${want} `));

    const down = await fetch(ctx.server.base + files({ path: '/tmp/big.bin' }), { headers: auth() });
    assert.equal(down.status, 200);
    assert.equal(down.headers.get('content-length'), String(data.length));
    assert.match(down.headers.get('content-disposition'), /filename\*=UTF-8''big\.bin/);
    const hash = createHash('sha256');
    for await (const chunk of down.body) hash.update(chunk);
    assert.equal(hash.digest('hex'), want);

    const list = await ctx.server.api('GET', files({ dir: '/tmp' }));
    assert.equal(list.status, 200, list.text);
    const entry = list.json.entries.find((e) => e.name === 'big.bin');
    assert.deepEqual([entry.type, entry.size, entry.path], ['file', data.length, '/tmp/big.bin']);

    const gone = await ctx.server.api('DELETE', files({ path: '/tmp/big.bin' }));
    assert.equal(gone.status, 200, gone.text);
    const again = await ctx.server.api('GET', files({ path: '/tmp/big.bin' }));
    assert.equal(again.status, 404);
    assert.equal(again.json.error.code, 'file_not_found');
  });

  test('paths out of the home directory and /tmp are refused, by name, symlink or traversal', async () => {
    // Planted inside by the sandbox itself: links that lead out.
    await exec(['sh', '-c', 'ln -sfn /etc /tmp/etc-link && ln -sf /etc/passwd /tmp/passwd-link']);
    const refusals = [
      [{ path: '/etc/passwd' }, 403, 'path_not_allowed'],
      [{ path: '/tmp/etc-link/passwd' }, 403, 'path_not_allowed'],
      [{ path: '/tmp/passwd-link' }, 403, 'path_not_allowed'],
      [{ dir: '/tmp/etc-link' }, 403, 'path_not_allowed'],
      [{ path: '/tmp/../etc/passwd' }, 400, 'invalid_request'],
      [{ path: 'tmp/x' }, 400, 'invalid_request'],
      [{ path: '/tmp', dir: '/tmp' }, 400, 'invalid_request'],
      [{ path: '/tmp' }, 400, 'not_a_file'],
      [{ path: `${home}/nothing-here` }, 404, 'file_not_found'],
    ];
    for (const [query, status, code] of refusals) {
      const r = await ctx.server.api('GET', files(query));
      assert.equal(r.status, status, `${JSON.stringify(query)}: ${r.text}`);
      assert.equal(r.json.error.code, code, JSON.stringify(query));
    }
    // Writing through a planted link neither follows it nor lands outside.
    for (const p of ['/tmp/etc-link/cabin-written', '/etc/cabin-written']) {
      const r = await put(p, 'x');
      assert.equal(r.status, 403, p);
      assert.equal((await r.json()).error.code, 'path_not_allowed');
    }
    const over = await put('/tmp/passwd-link', 'replaced');
    assert.equal(over.status, 200);
    assert.equal(await exec(['sh', '-c', 'test -L /tmp/passwd-link || cat /tmp/passwd-link']),
                 'replaced');
    assert.notEqual(await exec(['head', '-c', '8', '/etc/passwd']), 'replaced');
  });

  test('uploads that are too large or have no length are refused before their body', async () => {
    const big = await rawHttp(ctx.server.port,
      `PUT ${files({ path: '/tmp/huge' })} HTTP/1.1\r\nHost: x\r\n` +
      `Authorization: Bearer ${ctx.server.key}\r\nContent-Length: ${300 * 1024 * 1024}\r\n\r\n`);
    assert.equal(big.status, 413, big.text);
    assert.equal(big.json.error.code, 'upload_too_large');
    const chunked = await rawHttp(ctx.server.port,
      `PUT ${files({ path: '/tmp/chunked' })} HTTP/1.1\r\nHost: x\r\n` +
      `Authorization: Bearer ${ctx.server.key}\r\nTransfer-Encoding: chunked\r\n\r\n`,
      Buffer.from('1\r\nx\r\n0\r\n\r\n'));
    assert.equal(chunked.status, 400, chunked.text);
    assert.equal(chunked.json.error.code, 'length_required');
    const noKey = await rawHttp(ctx.server.port,
      `PUT ${files({ path: '/tmp/nokey' })} HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n`,
      Buffer.from('x'));
    assert.equal(noKey.status, 401);
    // A body that stops early leaves nothing behind.
    const short = await rawHttp(ctx.server.port,
      `PUT ${files({ path: '/tmp/short' })} HTTP/1.1\r\nHost: x\r\n` +
      `Authorization: Bearer ${ctx.server.key}\r\nContent-Length: 100\r\n\r\n`, Buffer.from('only ten b'),
      { halfClose: true });
    assert.equal(short.status, 400, short.text);
    assert.equal(short.json.error.code, 'upload_incomplete');
    assert.equal(await exec(['sh', '-c', 'ls -A /tmp | grep -c -e short -e cabin-upload || true']),
                 '0\n');
  });

  test('an uploaded file fills a page\'s file input, through CDP with its sandbox path', async () => {
    const body = 'name,total\nbolts,12\n';
    assert.equal((await put(`${home}/report.csv`, body)).status, 200);
    await page.setContent(`<input type=file id=f>
      <script>document.getElementById('f').addEventListener('change', async (e) => {
        window.got = { name: e.target.files[0].name, text: await e.target.files[0].text() };
      });</script>`);
    const cdp = await page.context().newCDPSession(page);
    const { root } = await cdp.send('DOM.getDocument');
    const { nodeId } = await cdp.send('DOM.querySelector', { nodeId: root.nodeId, selector: '#f' });
    await cdp.send('DOM.setFileInputFiles', { nodeId, files: [`${home}/report.csv`] });
    const got = await waitFor(() => page.evaluate(() => window.got), { what: 'the change event' });
    assert.deepEqual(got, { name: 'report.csv', text: body });
    await cdp.detach();
  });

  test('the upload action fills a file input by selector, or the chooser a page opened', async () => {
    const act = (body) => ctx.server.api('POST', `/v1/sessions/${s.id}/computer`, body);
    assert.equal((await put('/tmp/a.txt', 'first')).status, 200);
    assert.equal((await put(`${home}/b.txt`, 'second')).status, 200);
    await page.setContent(`<input type=file id=f multiple>
      <input type=file id=hidden style="display:none"><button id=pick>Pick</button>
      <script>
        window.got = {};
        for (const id of ['f', 'hidden']) {
          document.getElementById(id).addEventListener('change', async (e) => {
            window.got[id] = await Promise.all([...e.target.files].map(async (f) => f.name + '=' + await f.text()));
          });
        }
        document.getElementById('pick').onclick = () => document.getElementById('hidden').click();
      </script>`);
    await page.bringToFront();
    const r = await act({ op: 'upload', paths: ['/tmp/a.txt', `${home}/b.txt`], selector: '#f' });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.results, [{ op: 'upload', files: 2 }]);
    assert.deepEqual(await waitFor(() => page.evaluate(() => window.got.f)),
                     ['a.txt=first', 'b.txt=second']);

    // A page's own button opens a chooser: no window, an event, and the action fills it.
    const choosers = sse.events.filter((e) => e.type === 'file_chooser_opened').length;
    await page.click('#pick');
    const [chooser] = (await seen('file_chooser_opened', choosers + 1)).slice(-1);
    assert.equal(chooser.mode, 'single');
    const filled = await act({ op: 'upload', paths: ['/tmp/a.txt'] });
    assert.equal(filled.status, 200, filled.text);
    assert.deepEqual(await waitFor(() => page.evaluate(() => window.got.hidden)), ['a.txt=first']);

    // Nothing to fill, or files the API may not reach: the batch fails there, saying why.
    await page.evaluate(() => document.activeElement?.blur());
    const none = await act({ op: 'upload', paths: ['/tmp/a.txt'] });
    assert.equal(none.status, 422, none.text);
    assert.equal(none.json.error.code, 'no_file_input');
    const out = await act({ op: 'upload', paths: ['/etc/passwd'], selector: '#f' });
    assert.equal(out.status, 422, out.text);
    assert.equal(out.json.error.code, 'path_not_allowed');
    const bad = await act({ op: 'upload', paths: ['../x'], selector: '#f' });
    assert.equal(bad.status, 400, bad.text);
  });

  test('a download arrives in events, in /downloads and through the files API', async () => {
    const content = `hello ${randomBytes(4).toString('hex')}\n`;
    const before = (await ctx.server.api('GET', `/v1/sessions/${s.id}/downloads`)).json.downloads;
    await page.setContent(`<a id=a download="report 1.txt"
      href="data:text/plain;base64,${Buffer.from(content).toString('base64')}">get</a>`);
    await page.click('#a');
    const [started] = (await seen('download_started', 1)).slice(-1);
    assert.equal(started.name, 'report 1.txt');
    const [done] = (await seen('download_finished', 1)).slice(-1);
    assert.equal(done.id, started.id);
    assert.equal(done.sha256, sha256(Buffer.from(content)));
    assert.equal(done.size, content.length);
    assert.equal(done.path, `${home}/Downloads/report 1.txt`);

    const list = await ctx.server.api('GET', `/v1/sessions/${s.id}/downloads`);
    assert.equal(list.status, 200, list.text);
    assert.equal(list.json.downloads.length, before.length + 1);
    assert.equal(list.json.downloads.at(-1).sha256, done.sha256);
    const file = await fetch(ctx.server.base + files({ path: done.path }), { headers: auth() });
    assert.equal(await file.text(), content);
  });

  test('pages, navigations and dialogs become events', async () => {
    const url = 'data:text/html,<title>second</title>hi';
    const other = await page.context().newPage();
    const opened = await seen('page_opened', 2);
    await other.goto(url);
    const nav = await waitFor(() => sse.events.find((e) => e.type === 'navigated' && e.url === url),
                              { timeoutMs: 20000, what: 'the navigation' });
    assert.equal(nav.page, opened.at(-1).page);
    other.once('dialog', (d) => d.dismiss());
    await other.evaluate(() => setTimeout(() => alert('are you there?'), 0));
    const [dialog] = await seen('dialog_opened', 1);
    assert.deepEqual([dialog.dialog, dialog.message, dialog.page], ['alert', 'are you there?', nav.page]);
    await other.close();
    const closed = await seen('page_closed', 1);
    assert.equal(closed.at(-1).page, nav.page);
    // Every event has its place in the sequence.
    const ids = sse.events.map((e) => e.id);
    assert.deepEqual(ids, [...ids].sort((a, b) => a - b));
  });
});
