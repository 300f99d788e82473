// The recipes in examples/ run as a user would run them, against a real cabind, on pages from a
// loopback site the sessions may reach; each test asserts what the recipe did.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';

import { startCabind, waitFor } from './helpers.mjs';
import { onPage } from './shop_site.mjs';

const PAGES = {
  '/hello': '<!doctype html><title>hello page</title><h1>Hello from the loopback site</h1>',
  // A text field over the whole page; Enter puts what was typed in the title.
  '/form': `<!doctype html><title>form</title>
<style>html,body{margin:0;height:100%} textarea{position:fixed;inset:0;width:100%;height:100%}</style>
<textarea id=t></textarea>
<script>t.addEventListener('keydown', (e) => {
  if (e.key === 'Enter') { e.preventDefault(); document.title = 'sent: ' + t.value; } });</script>`,
  // A button over the whole page that counts clicks and double clicks in the title.
  '/button': `<!doctype html><title>clicks 0</title>
<style>html,body{margin:0;height:100%} button{position:fixed;inset:0;width:100%;height:100%}</style>
<button id=b>b</button><input id=i style="position:fixed;left:0;top:0">
<script>let n = 0, d = 0;
b.addEventListener('click', () => { n++; document.title = 'clicks ' + n + ' double ' + d; });
b.addEventListener('dblclick', () => { d++; document.title = 'clicks ' + n + ' double ' + d; });
</script>`,
};

let site, server, siteUrl, sessionSpec;

function run(file, args = [], env = {}) {
  return new Promise((resolve) => {
    execFile(process.execPath, [file, ...args], {
      env: { ...process.env, CABIN_URL: server.base, CABIN_API_KEY: server.key,
             CABIN_SESSION_SPEC: JSON.stringify(sessionSpec), ...env },
      timeout: 120000,
    }, (err, stdout, stderr) => resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr }));
  });
}

const lines = (out) => out.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l));

before(async () => {
  site = http.createServer((req, res) => {
    res.setHeader('content-type', 'text/html');
    res.end(PAGES[req.url] ?? '<title>not here</title>');
  });
  await new Promise((resolve) => site.listen(0, '127.0.0.1', resolve));
  const port = site.address().port;
  siteUrl = `http://site.test:${port}`;
  sessionSpec = { network: { mode: 'allowlist', allow: [{ host: 'site.test', ports: [port] }] } };
  server = await startCabind({
    args: ['--egress-resolve', 'site.test=127.0.0.1', '--egress-allow-host-cidr', '127.0.0.1/32'],
  });
});

after(async () => {
  await server?.stop();
  site?.close();
});

async function noSessionsLeft() {
  const r = await server.api('GET', '/v1/sessions');
  assert.deepEqual(r.json.sessions.map((s) => s.id), [], 'the recipe deleted its session');
}

describe('examples', () => {
  test('the Playwright quickstart opens a page and reads it', async () => {
    const r = await run('examples/playwright-quickstart.mjs', [`${siteUrl}/hello`]);
    assert.equal(r.code, 0, r.stderr);
    const [out] = lines(r.stdout);
    assert.equal(out.title, 'hello page');
    assert.equal(out.h1, 'Hello from the loopback site');
    await noSessionsLeft();
  });

  test('the Puppeteer quickstart opens a page and reads it', async () => {
    const r = await run('examples/puppeteer-quickstart.mjs', [`${siteUrl}/hello`]);
    assert.equal(r.code, 0, r.stderr);
    const [out] = lines(r.stdout);
    assert.equal(out.title, 'hello page');
    assert.equal(out.h1, 'Hello from the loopback site');
    await noSessionsLeft();
  });

  test('Playwright MCP drives the session through --cdp-endpoint', async () => {
    const r = await run('examples/playwright-mcp.mjs', [`${siteUrl}/hello`]);
    assert.equal(r.code, 0, r.stderr);
    const [out] = lines(r.stdout);
    assert.match(out.snapshot, /heading "Hello from the loopback site"/);
    await noSessionsLeft();
  });

  test('the Anthropic tool handler plays recorded model turns on the screen', async () => {
    const saved = sessionSpec;
    sessionSpec = { ...saved, start_url: `${siteUrl}/form` };
    try {
      const r = await run('examples/anthropic-computer-use.mjs',
        ['examples/recorded/anthropic-turns.json'], { KEEP_SESSION: '1' });
      assert.equal(r.code, 0, r.stderr);
      const out = lines(r.stdout);
      const kept = out.pop().kept;
      try {
        assert.deepEqual(out.map((o) => [o.action, o.is_error]), [
          ['screenshot', false], ['left_click', false], ['type', false], ['key', false],
          ['cursor_position', false], ['left_click', true], ['screenshot', false]]);
        assert.equal(out[0].content[0].type, 'image');
        assert.equal(out[0].content[0].media_type, 'image/png');
        assert.deepEqual(out[4].content, [{ type: 'text', text: 'X=512,Y=500' }]);
        assert.match(out[5].content[0].text, /400/);
        const s = (await server.api('GET', `/v1/sessions/${kept}`)).json;
        await waitFor(async () => (await onPage(s)).title === 'sent: hello from the model',
          { what: 'the typed text sent with Return' });
      } finally {
        await server.api('DELETE', `/v1/sessions/${kept}`);
      }
    } finally {
      sessionSpec = saved;
    }
  });

  test('the OpenAI Agents Computer type-checks against @openai/agents-core and acts', async () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-openai-computer-'));
    try {
      const tsc = await new Promise((resolve) => execFile(process.execPath, [
        'node_modules/typescript/bin/tsc', '--strict', '--target', 'ES2022', '--module', 'NodeNext',
        '--moduleResolution', 'NodeNext', '--skipLibCheck', '--types', 'node', '--outDir', out,
        'examples/openai-computer.ts',
      ], (err, stdout) => resolve({ code: err ? 1 : 0, stdout })));
      assert.equal(tsc.code, 0, tsc.stdout);
      const { CabinComputer } = await import(pathToFileURL(path.join(out, 'openai-computer.js')).href);
      const computer = await CabinComputer.create(
        { ...sessionSpec, start_url: `${siteUrl}/button`, resolution: { width: 1024, height: 768 } },
        server.base, server.key);
      try {
        assert.deepEqual(computer.dimensions, [1024, 768]);
        assert.equal(computer.environment, 'ubuntu');
        const s = (await server.api('GET', `/v1/sessions/${computer.sessionId}`)).json;
        const png = Buffer.from(await computer.screenshot(), 'base64');
        assert.deepEqual([...png.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
        await computer.move(500, 500);
        await computer.click(500, 500, 'left');
        await computer.doubleClick(510, 510);
        // A click, then a double click: three clicks and a dblclick in all.
        await waitFor(async () => (await onPage(s)).title === 'clicks 3 double 1',
          { what: 'the clicks on the page' });
        await computer.scroll(500, 500, 0, 100);
        await computer.drag([[400, 400], [450, 450]]);
        await computer.keypress(['CTRL', 'A']);
        await computer.wait();
      } finally {
        await computer.close();
      }
      await noSessionsLeft();
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
  });
});
