// The MCP conformance runner (@modelcontextprotocol/conformance) against POST /mcp. The runner
// sends no credentials, so it talks to a small proxy that adds the API key and passes everything
// else through: Host and Origin keep their names, with the proxy's port mapped to cabind's.
// Scenarios for what Cabin does not offer (resources, prompts, the runner's own test tools...)
// are listed in fixtures/mcp-conformance-baseline.yml; the runner fails on a listed scenario
// that passes as well as on an unlisted one that fails.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { startCabind } from './helpers.mjs';

const RUNNER = path.resolve('node_modules/@modelcontextprotocol/conformance/dist/index.js');
const BASELINE = path.resolve('tests/integration/fixtures/mcp-conformance-baseline.yml');

let server, proxy, outDir;

before(async () => {
  server = await startCabind();
  proxy = http.createServer((req, res) => {
    const map = (v) => v?.replace(`:${proxy.address().port}`, `:${server.port}`);
    const headers = { ...req.headers, authorization: `Bearer ${server.key}` };
    headers.host = map(headers.host);
    if (headers.origin) headers.origin = map(headers.origin);
    const up = http.request({ host: '127.0.0.1', port: server.port, method: req.method, path: req.url, headers },
      (answer) => {
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
      });
    up.on('error', (err) => res.destroy(err));
    req.pipe(up);
  });
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  outDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-mcp-conformance-'));
});

after(async () => {
  proxy?.close();
  await server?.stop();
  if (outDir) fs.rmSync(outDir, { recursive: true, force: true });
});

test('the MCP conformance runner passes every server scenario for what /mcp offers', async () => {
  const url = `http://127.0.0.1:${proxy.address().port}/mcp`;
  const { code, stdout, stderr } = await new Promise((resolve) => {
    execFile(process.execPath, [RUNNER, 'server', '--url', url, '--suite', 'all',
      '--expected-failures', BASELINE, '-o', outDir],
    { timeout: 180000, maxBuffer: 16 << 20 },
    (err, out, errOut) => resolve({ code: err ? (err.code ?? 1) : 0, stdout: out, stderr: errOut }));
  });
  assert.equal(code, 0, `conformance runner:\n${stdout}\n${stderr}`);
  // The scenarios that apply passed: each of their checks, none excused.
  for (const name of ['server-initialize', 'ping', 'tools-list', 'dns-rebinding-protection']) {
    assert.match(stdout, new RegExp(`✓ ${name}: [1-9]\\d* passed, 0 failed`), `${name} passed`);
  }
});
