// Connection exhaustion: caps on connections in all and per client address, a short deadline for
// a connection's first request, a per-session cap on token-authenticated connections, and an
// accept loop that backs off and logs once a second when descriptors run out, then recovers.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import { test } from 'node:test';

import { startCabind, waitFor, withDeadline, wsOpen } from './helpers.mjs';

// Opens a TCP connection from `localAddress` and resolves once it is connected.
async function connect(port, localAddress = '127.0.0.1') {
  const s = net.connect({ port, host: '127.0.0.1', localAddress });
  s.on('error', () => {});
  await once(s, 'connect');
  return s;
}

// Resolves true when the server closes `s` within `ms`, false otherwise.
function closedWithin(s, ms) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    s.once('close', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

async function healthz(base) {
  const r = await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(5000) });
  await r.text();
  return r.status;
}

function cpuSeconds(pid) {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;  // utime + stime, in clock ticks
}

// Sends a request on a new connection and resolves with all that came back before the server
// closed it.
async function askOver(port, localAddress) {
  const s = await connect(port, localAddress);
  const chunks = [];
  s.on('data', (d) => chunks.push(d));
  s.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  assert.ok(await closedWithin(s, 5000), 'a connection over the cap is closed at once');
  return Buffer.concat(chunks).toString();
}

test('connections over the per-address or the total cap are told so, then closed at once', async () => {
  const server = await startCabind({
    args: ['--max-connections', '8', '--max-connections-per-peer', '5'],
  });
  const open = [];
  try {
    for (let i = 0; i < 5; i++) open.push(await connect(server.port));
    // A client, a gateway or a load balancer can tell a cap from a crash: an answer, with when
    // to come back.
    const sixth = await askOver(server.port);
    assert.match(sixth, /^HTTP\/1\.1 429 /);
    assert.match(sixth, /\r\nRetry-After: 1\r\n/i);
    assert.match(sixth, /\r\nConnection: close\r\n/i);
    assert.match(sixth, /"code":"too_many_connections".*--max-connections-per-peer/);
    for (let i = 0; i < 3; i++) open.push(await connect(server.port, '127.0.0.2'));
    const ninth = await askOver(server.port, '127.0.0.2');
    assert.match(ninth, /^HTTP\/1\.1 503 /);
    assert.match(ninth, /\r\nRetry-After: 1\r\n/i);
    assert.match(ninth, /"code":"capacity".*--max-connections allows/);
    // The ones within the caps are served.
    open[0].write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    const [answer] = await withDeadline(once(open[0], 'data'), 5000, 'an answer');
    assert.match(String(answer), /^HTTP\/1\.1 200/);
    // A place that frees up is taken again.
    open.splice(1, 1)[0].destroy();
    await waitFor(async () => (await healthz(server.base)) === 200, { what: 'a freed place' });
    assert.match(server.logTail(40), /refusing a connection/, 'refusals are logged');
    // And counted (once the held connections have gone, so that this request has a place).
    for (const s of open.splice(0)) s.destroy();
    await waitFor(async () => (await healthz(server.base)) === 200, { what: 'places again' });
    const metrics = await fetch(`${server.base}/metrics`, { headers: { authorization: `Bearer ${server.key}` } });
    const text = await metrics.text();
    assert.match(text, /cabin_api_errors_total\{code="too_many_connections"\} [1-9]/);
    assert.match(text, /cabin_api_errors_total\{code="capacity"\} [1-9]/);
  } finally {
    for (const s of open) s.destroy();
    await server.stop();
  }
});

test('a connection that sends no request is closed after the first-request deadline', async () => {
  const server = await startCabind();
  try {
    const t0 = Date.now();
    const s = await connect(server.port);
    assert.ok(await closedWithin(s, 20000), 'the idle connection is closed');
    const after = Date.now() - t0;
    assert.ok(after >= 8000 && after < 15000, `closed after ${after} ms, not about 10 s`);
  } finally {
    await server.stop();
  }
});

test('out of descriptors, accept backs off and logs once a second, then recovers', async () => {
  const server = await startCabind({
    wrap: ['prlimit', '--nofile=64:64', '--'],
    args: ['--max-connections', '1000', '--max-connections-per-peer', '1000'],
  });
  const idle = [];
  try {
    const mark = server.logMark();
    const cpu0 = cpuSeconds(server.pid);
    const t0 = Date.now();
    // More than the descriptors left: the rest wait in the listen backlog.
    for (let i = 0; i < 80; i++) idle.push(await connect(server.port));
    await waitFor(() => server.logSince(mark).some((l) => /accept: Too many open files/.test(l)),
      { what: 'cabind to run out of descriptors' });
    // A window to measure the rate in, shorter than the first-request deadline.
    await new Promise((r) => setTimeout(r, 3000));
    const seconds = (Date.now() - t0) / 1000;
    const lines = server.logSince(mark).filter((l) => /accept/.test(l));
    assert.ok(lines.length <= Math.ceil(seconds) + 1,
      `${lines.length} accept lines in ${seconds.toFixed(1)} s:\n${lines.slice(0, 5).join('\n')}`);
    const cpu = cpuSeconds(server.pid) - cpu0;
    assert.ok(cpu < 0.5 * seconds, `cabind used ${cpu.toFixed(2)} s of CPU in ${seconds.toFixed(1)} s`);
    for (const s of idle) s.destroy();
    await waitFor(async () => (await healthz(server.base)) === 200,
      { timeoutMs: 15000, what: 'cabind to serve again' });
  } finally {
    for (const s of idle) s.destroy();
    await server.stop();
  }
});

test("a session's tokens hold at most --max-token-connections-per-session connections", async () => {
  const server = await startCabind({ args: ['--max-token-connections-per-session', '2'] });
  try {
    const s = await server.createSession({});
    const t = await server.api('POST', `/v1/sessions/${s.id}/tokens`, { scope: 'cdp' });
    assert.equal(t.status, 201, t.text);
    const url = `ws://${server.hostPort}/v1/sessions/${s.id}/cdp?token=${encodeURIComponent(t.json.token)}`;
    const first = await wsOpen(url);
    const second = await wsOpen(url);
    await assert.rejects(wsOpen(url), (err) => {
      assert.equal(err.status, 429);
      assert.equal(err.json?.error?.code, 'too_many_connections');
      return true;
    });
    // The API key is not counted, and a closed connection frees its place.
    const keyed = await wsOpen(`ws://${server.hostPort}/v1/sessions/${s.id}/cdp`, {
      headers: { authorization: `Bearer ${server.key}` },
    });
    keyed.close();
    first.close();
    await once(first, 'close');
    await waitFor(async () => {
      try {
        (await wsOpen(url)).close();
        return true;
      } catch {
        return false;
      }
    }, { what: 'a freed place' });
    second.close();
    await server.deleteSession(s.id);
  } finally {
    await server.stop();
  }
});
