// Shared by the preview tests: apps started inside a sandbox through exec, previews opened the
// way a browser opens them (token, then cookie), and requests with a chosen Host header.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';

import { waitFor } from './helpers.mjs';

export const DOMAIN = 'preview.test';
const APP = fs.readFileSync(new URL('./fixtures/preview_app.py', import.meta.url), 'utf8');

export async function exec(server, id, argv, extra = {}) {
  const r = await server.api('POST', `/v1/sessions/${id}/exec`, { argv, timeout_ms: 20000, ...extra });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

// A new session with the test app on 8000 and `python3 -m http.server` on 8001, both listening.
export async function startApps(server) {
  const session = await server.createSession({});
  const started = await exec(server, session.id, ['sh', '-c', [
    'cd "${HOME:-/tmp}"',
    'cat > preview_app.py',
    'mkdir -p site && echo "hello from the sandbox" > site/hello.txt',
    '(setsid python3 preview_app.py 8000 > app.log 2>&1 < /dev/null &)',
    '(setsid python3 -m http.server 8001 --bind 127.0.0.1 --directory site > files.log 2>&1 < /dev/null &)',
  ].join(' && ')], { stdin: APP });
  assert.equal(started.exit_code, 0, JSON.stringify(started));
  for (const port of [8000, 8001]) {
    await waitFor(async () => (await exec(server, session.id, [
      'python3', '-c', `import socket; socket.create_connection(("127.0.0.1", ${port}), 1)`,
    ])).exit_code === 0, { timeoutMs: 20000, intervalMs: 200, what: `port ${port} in the sandbox` });
  }
  return { session };
}

// One request to `address` (127.0.0.1):port with Host `host`: {status, headers, body}.
export function hostRequest(port, host, path, headers = {}, { method = 'GET', address = '127.0.0.1' } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: address, port, path, method, setHost: false, agent: false,
      headers: { host: `${host}:${port}`, ...headers },
    }, (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers,
                                    body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end();
  });
}

// Creates a preview and follows its URL once: {id, base, prefix | host, cookie, first}.
export async function openPreview(server, sessionId, port, mode, ttlS = 600) {
  const p = await server.api('POST', `/v1/sessions/${sessionId}/previews`, { port, ttl_s: ttlS });
  assert.equal(p.status, 201, p.text);
  if (mode === 'path') {
    const first = await fetch(p.json.path_url, { redirect: 'manual' });
    const cookie = first.headers.get('set-cookie')?.split(';')[0];
    assert.ok(cookie, `no cookie from ${first.status}`);
    return { id: p.json.id, token: new URL(p.json.path_url).searchParams.get('cabin_token'),
             base: server.base, prefix: `/preview/${p.json.id}`, cookie, first };
  }
  const url = new URL(p.json.host_url);
  const first = await hostRequest(server.port, url.hostname, url.pathname + url.search);
  const cookie = first.headers['set-cookie']?.[0]?.split(';')[0];
  assert.ok(cookie, `no cookie from ${first.status} ${first.body}`);
  return { id: p.json.id, token: url.searchParams.get('cabin_token'), host: url.hostname,
           cookie, first };
}
