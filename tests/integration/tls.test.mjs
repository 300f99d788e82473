// TLS on the one listener: a self-signed pair generated for development and a given pair, checked
// by real TLS clients (Node's TLS stack with certificate verification, curl); URLs use https/wss;
// preview cookies are Secure, and __Host- on a preview's own host; plain HTTP beyond loopback is
// refused unless explicitly allowed.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';

import {
  BIN_DIR, Cdp, removeServerDirs, removeTree, startCabind, waitFor, withDeadline, wsOpen,
} from './helpers.mjs';

const cleanup = [];
after(async () => {
  for (const fn of cleanup.reverse()) await fn();
});

// `servername`: the name to ask for and verify (a preview host reached at 127.0.0.1).
function request(url, { ca, method = 'GET', headers = {}, body, servername } = {}) {
  return new Promise((resolve, reject) => {
    const req = https.request(url, { ca, method, headers, agent: false, servername }, (res) => {
      const cert = res.socket.getPeerCertificate();
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, text, json, cert });
      });
    });
    req.on('error', reject);
    if (body) req.end(JSON.stringify(body)); else req.end();
  });
}

test('--tls-self-signed: verified HTTPS and WSS, https URLs, Secure preview cookies', async () => {
  const server = await startCabind({ args: ['--tls-self-signed', '--preview-domain', 'preview.test'] });
  cleanup.push(() => server.stop());
  assert.match(server.base, /^https:\/\/127\.0\.0\.1:\d+$/);
  const ca = fs.readFileSync(path.join(server.stateDir, 'tls', 'self-signed.crt'));
  const auth = { authorization: `Bearer ${server.key}` };

  const info = await request(`${server.base}/v1/info`, { ca, headers: auth });
  assert.equal(info.status, 200, info.text);
  assert.equal(info.cert.subject.CN, 'cabind');
  // The name a browser uses works too, not just the address.
  const byName = await request(`https://localhost:${server.port}/healthz`, { ca });
  assert.equal(byName.status, 200);

  // Without trusting the certificate, a verifying client refuses it.
  await assert.rejects(request(`${server.base}/healthz`), (err) =>
    /self[- ]signed/i.test(err.code + err.message));
  // curl, with the certificate as its CA.
  const curl = execFileSync('curl', ['-sS', '--cacert', path.join(server.stateDir, 'tls', 'self-signed.crt'),
                                     `${server.base}/healthz`]).toString();
  assert.deepEqual(JSON.parse(curl), { status: 'ok' });

  const created = await request(`${server.base}/v1/sessions`, { ca, method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: {} });
  assert.equal(created.status, 201, created.text);
  const s = created.json;
  assert.match(s.cdp_url, new RegExp(`^wss://127\\.0\\.0\\.1:${server.port}/v1/sessions/${s.id}/cdp\\?token=`));
  assert.match(s.json_version_url, /^https:/);
  const cdp = await Cdp.connect(s.cdp_url, { ca });
  assert.ok((await cdp.send('Browser.getVersion')).product);

  const p = await request(`${server.base}/v1/sessions/${s.id}/previews`, { ca, method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: { port: 8000 } });
  assert.equal(p.status, 201, p.text);
  assert.match(p.json.path_url, /^https:\/\//);
  const first = await request(p.json.path_url, { ca });
  assert.equal(first.status, 302);
  assert.match(first.headers['set-cookie'][0], /^cabin_preview=[^;]+; Path=\/preview\/prv_[a-z0-9]{20}\/; Max-Age=\d+; HttpOnly; SameSite=Lax; Secure$/);

  // On its own host the cookie is __Host-: no sibling preview can set one over it. Only that name
  // opens the preview (nothing listens on the port: past the cookie, the answer is 502).
  const hostUrl = new URL(p.json.host_url);
  assert.equal(hostUrl.protocol, 'https:');
  const onHost = (pathname, opts = {}) => request(`https://127.0.0.1:${server.port}${pathname}`, {
    ca, servername: hostUrl.hostname, ...opts,
    headers: { host: `${hostUrl.hostname}:${server.port}`, ...opts.headers } });
  const hostFirst = await onHost(hostUrl.pathname + hostUrl.search);
  assert.equal(hostFirst.status, 302, hostFirst.text);
  assert.match(hostFirst.headers['set-cookie'][0], /^__Host-cabin_preview=[^;]+; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Lax; Secure$/);
  const token = hostUrl.searchParams.get('cabin_token');
  const withHostCookie = await onHost('/x', { headers: { cookie: `__Host-cabin_preview=${token}` } });
  assert.equal(withHostCookie.status, 502, withHostCookie.text);
  assert.equal(withHostCookie.json.error.code, 'preview_unreachable');
  const plainName = await onHost('/x', { headers: { cookie: `cabin_preview=${token}` } });
  assert.equal(plainName.status, 401, plainName.text);
  assert.equal(plainName.json.error.code, 'unauthenticated');
  // Its own origin is https.
  const sameOrigin = await onHost('/x', { method: 'POST', headers: {
    cookie: `__Host-cabin_preview=${token}`, origin: `https://${hostUrl.hostname}:${server.port}` } });
  assert.equal(sameOrigin.status, 502, sameOrigin.text);
  const downgraded = await onHost('/x', { method: 'POST', headers: {
    cookie: `__Host-cabin_preview=${token}`, origin: `http://${hostUrl.hostname}:${server.port}` } });
  assert.equal(downgraded.status, 403, downgraded.text);
  assert.equal(downgraded.json.error.code, 'cross_origin');

  // The screen's frame stream and the live view's RFB bridge work over wss too, and a viewer let
  // in by a token goes with the revocation below.
  const tok = await request(`${server.base}/v1/sessions/${s.id}/tokens`, { ca, method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: { scope: 'view', ttl_s: 600 } });
  assert.equal(tok.status, 201, tok.text);
  const wsBase = `wss://127.0.0.1:${server.port}/v1/sessions/${s.id}`;
  let frames = 0;
  const viewer = await wsOpen(`${wsBase}/frames?fps=5&token=${tok.json.token}`, {
    ca, onMessage: (d, binary) => { if (binary) frames++; } });
  const viewerClosed = new Promise((r) => viewer.once('close', r));
  await waitFor(() => frames >= 1, { what: 'a frame over wss' });
  let rfb = '';
  const vnc = await wsOpen(`${wsBase}/vnc?token=${tok.json.token}`, {
    ca, onMessage: (d) => { rfb += d.toString('latin1'); } });
  await waitFor(() => rfb.startsWith('RFB 003.'), { what: 'the RFB greeting over wss' });
  vnc.close();

  // Revocation closes the bridge under TLS as well.
  const closed = cdp.closed;
  const rv = await request(`${server.base}/v1/sessions/${s.id}/tokens/revoke`, { ca, method: 'POST', headers: auth });
  assert.equal(rv.status, 200, rv.text);
  await withDeadline(closed, 5000, 'the TLS CDP bridge to close');
  await withDeadline(viewerClosed, 5000, 'the token-authenticated frame viewer to close');
  const del = await request(`${server.base}/v1/sessions/${s.id}`, { ca, method: 'DELETE', headers: auth });
  assert.equal(del.status, 200);
});

test('--tls-cert and --tls-key serve the given certificate; bad pairs fail at start', async () => {
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'cabin-tls-'));
  cleanup.push(() => removeTree(dir));
  const cert = path.join(dir, 'c.pem');
  const key = path.join(dir, 'k.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256',
                           '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=given',
                           '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
  const server = await startCabind({ args: ['--tls-cert', cert, '--tls-key', key,
                                            '--public-url', 'https://cabin.example.com'] });
  cleanup.push(() => server.stop());
  const ca = fs.readFileSync(cert);
  const r = await request(`${server.base}/healthz`, { ca });
  assert.equal(r.cert.subject.CN, 'given');
  const created = await request(`${server.base}/v1/sessions`, {
    ca, method: 'POST', headers: { authorization: `Bearer ${server.key}`, 'content-type': 'application/json' }, body: {} });
  assert.equal(created.status, 201, created.text);
  // The configured public URL wins over the address the request came to.
  assert.match(created.json.cdp_url, /^wss:\/\/cabin\.example\.com\/v1\/sessions\//);
  await request(`${server.base}/v1/sessions/${created.json.id}`, {
    ca, method: 'DELETE', headers: { authorization: `Bearer ${server.key}` } });

  const other = path.join(dir, 'other.pem');
  execFileSync('openssl', ['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', other]);
  const bad = await runToExit(['--listen', '127.0.0.1:0', '--tls-cert', cert, '--tls-key', other]);
  assert.equal(bad.code, 1);
  assert.match(bad.output, /cannot load private key .*mismatch|does not match/);
  const half = await runToExit(['--listen', '127.0.0.1:0', '--tls-cert', cert]);
  assert.equal(half.code, 2);
  assert.match(half.output, /--tls-cert and --tls-key go together/);
});

test('plain HTTP is refused beyond loopback unless --allow-plain-http', async () => {
  const refused = await runToExit(['--listen', '0.0.0.0:0']);
  assert.equal(refused.code, 1);
  assert.match(refused.output, /refusing plain HTTP on 0\.0\.0\.0/);
  const allowed = await runUntilListening(['--listen', '0.0.0.0:0', '--allow-plain-http']);
  assert.match(allowed.line, /listening on http:\/\/0\.0\.0\.0:\d+$/);
  allowed.child.kill('SIGTERM');
  await new Promise((r) => allowed.child.once('exit', r));
  const tls = await runUntilListening(['--listen', '0.0.0.0:0', '--tls-self-signed']);
  assert.match(tls.line, /listening on https:\/\/0\.0\.0\.0:\d+$/);
  tls.child.kill('SIGTERM');
  await new Promise((r) => tls.child.once('exit', r));
});

async function dirs() {
  const stateDir = await fsp.mkdtemp(path.join(os.tmpdir(), 'cabin-state-'));
  const runDir = await fsp.mkdtemp('/tmp/cbr-');
  cleanup.push(() => removeServerDirs({ stateDir, runDir }));
  return ['--state-dir', stateDir, '--run-dir', runDir];
}

async function runToExit(args) {
  const child = spawn(path.join(BIN_DIR, 'cabind'), [...args, ...(await dirs())],
                      { env: { ...process.env, CABIN_API_KEY: 'k'.repeat(32) } });
  let output = '';
  child.stdout.on('data', (d) => { output += d; });
  child.stderr.on('data', (d) => { output += d; });
  const code = await withDeadline(new Promise((r) => child.once('exit', r)), 10000, 'cabind to exit');
  return { code, output };
}

async function runUntilListening(args) {
  const child = spawn(path.join(BIN_DIR, 'cabind'), [...args, ...(await dirs())],
                      { env: { ...process.env, CABIN_API_KEY: 'k'.repeat(32) } });
  let out = '';
  const line = await withDeadline(new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      const m = /^cabind .* listening on .*$/m.exec(out);
      if (m) resolve(m[0]);
    });
    child.once('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
  }), 10000, 'cabind to listen');
  return { child, line };
}
