// At SIGTERM every client stream hears that cabind is going away: a WebSocket close frame with
// 1001 ("server shutting down") on the CDP bridge, the live view's RFB, the frame stream and a
// preview's WebSocket, so that clients know to come back rather than take it for a crash (1006).
// The CDP bridge and preview tunnels relay frames they do not decode: the close frame goes in
// between two of the browser's frames, also while large messages stream.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, test } from 'node:test';

import {
  Cdp, startCabind, waitFor, waitForNoLeftovers, withDeadline, wsOpen,
} from './helpers.mjs';
import { openPreview, startApps } from './preview_helpers.mjs';
import { wsViewer } from './rfb_client.mjs';

const cleanup = [];
after(async () => {
  for (const fn of cleanup.reverse()) await fn();
});

// How a WebSocket ended: {code, reason}, or the error that ended it otherwise.
function closing(ws) {
  return new Promise((resolve) => {
    ws.once('close', (code, reason) => resolve({ code, reason: String(reason) }));
  });
}

const GOING_AWAY = { code: 1001, reason: 'server shutting down' };

// Bytes waiting in the receive queue of this host's TCP connection from local port `port`.
function receiveQueue(port) {
  const out = execFileSync('ss', ['-tnH', 'state', 'established', `( sport = :${port} )`],
                           { encoding: 'utf8' });
  const line = out.trim().split('\n')[0];
  return line ? Number(line.trim().split(/\s+/)[0]) : 0;
}

// A CDP client that keeps large messages streaming down, one after the other: screenshots of
// noise (hundreds of KiB, `shots` at a time) or strings of `hugeMiB` MiB, more than the kernel's
// socket buffers on both sides of cabind hold. A close frame cut into one corrupts the stream.
async function busyCdp(cdpUrl, { shots = 0, hugeMiB = 0 } = {}) {
  const cdp = await Cdp.connect(cdpUrl);
  const { targetInfos } = await cdp.send('Target.getTargets');
  const target = targetInfos.find((t) => t.type === 'page');
  const { sessionId } = await cdp.send('Target.attachToTarget',
                                       { targetId: target.targetId, flatten: true });
  // Noise: a PNG of it does not compress.
  await cdp.send('Runtime.evaluate', {
    expression: `(() => {
      const c = document.createElement('canvas'); c.width = 1280; c.height = 800;
      const g = c.getContext('2d'); const img = g.createImageData(1280, 800);
      for (let i = 0; i < img.data.length; i++) img.data[i] = (i * 2654435761) >>> 24;
      g.putImageData(img, 0, 0); document.body.style.margin = 0; document.body.append(c);
    })()`,
  }, sessionId);
  const state = { shots: 0, huge: 0, failed: null };
  const run = async (call) => {
    for (;;) {
      try {
        await call();
      } catch (err) {
        // Ended by the close (a request in flight, or sent while closing), as expected;
        // anything else (a bad message) is a failure.
        if (!/^CDP connection closed$|^WebSocket is not open/.test(err.message)) state.failed = err;
        return;
      }
    }
  };
  const shot = async () => {
    const { data } = await cdp.send('Page.captureScreenshot', { format: 'png' }, sessionId);
    assert.ok(data.length > 100000, `a screenshot of ${data.length} bytes`);
    state.shots += 1;
  };
  const huge = async () => {
    const { result } = await cdp.send('Runtime.evaluate', {
      expression: `'x'.repeat(${hugeMiB << 20})`, returnByValue: true,
    }, sessionId);
    assert.equal(result.value.length, hugeMiB << 20);
    state.huge += 1;
  };
  state.loops = [...Array(shots)].map(() => run(shot));
  if (hugeMiB) state.loops.push(run(huge));
  return { cdp, state };
}

test('at SIGTERM the CDP, RFB, frame and preview WebSockets all close with 1001', async () => {
  const first = await startCabind({ args: ['--on-shutdown', 'keep'] });
  let swept = false;
  cleanup.push(async () => {
    if (swept) return;
    // Failed half-way: a cabind on the same directories ends what the first one left.
    await first.stop({ keep: true });
    const sweeper = await startCabind({ stateDir: first.stateDir, runDir: first.runDir, key: first.key });
    await sweeper.stop();
  });
  const { session: s } = await startApps(first);
  const view = await first.api('POST', `/v1/sessions/${s.id}/tokens`, { scope: 'view', ttl_s: 600 });
  assert.equal(view.status, 201, view.text);

  const busy = await busyCdp(s.cdp_url, { hugeMiB: 32 });
  const cdpClosed = closing(busy.cdp.ws);
  const idle = await Cdp.connect(s.cdp_url);
  const idleClosed = closing(idle.ws);
  const rfb = await wsViewer(`ws://${first.hostPort}/v1/sessions/${s.id}/vnc?token=` +
                             encodeURIComponent(view.json.token));
  const rfbClosed = closing(rfb.socket);
  const frames = await wsOpen(`ws://${first.hostPort}/v1/sessions/${s.id}/frames?format=jpeg&fps=5`,
                              { headers: { authorization: `Bearer ${first.key}` } });
  const framesClosed = closing(frames);
  const pv = await openPreview(first, s.id, 8000, 'path');
  const app = await wsOpen(`ws://${first.hostPort}${pv.prefix}/ws`, { headers: { cookie: pv.cookie } });
  const appClosed = closing(app);
  const echo = new Promise((r) => app.once('message', (d) => r(d.toString())));
  app.send('hi');
  assert.equal(await withDeadline(echo, 5000, 'the echo'), 'echo:hi');
  await waitFor(() => busy.state.huge >= 2, { timeoutMs: 20000, what: 'large messages streaming' });

  // The busy client stops reading. The next 32 MiB message is all it waits for: once some of it
  // has come, it is stuck half-way down its connection (the buffers on both sides of cabind hold
  // less) when cabind is told to go, and the close frame must wait for the message's end.
  busy.cdp.ws._socket.pause();
  await waitFor(() => receiveQueue(busy.cdp.ws._socket.localPort) > 0,
                { what: 'the next message to begin' });
  const stopped = first.stop({ keep: true });
  // The idle client's close: cabind has asked every stream to go away.
  await withDeadline(idleClosed, 10000, 'the idle CDP client to close');
  busy.cdp.ws._socket.resume();
  const ends = await withDeadline(
    Promise.all([cdpClosed, idleClosed, rfbClosed, framesClosed, appClosed]), 10000,
    'every client stream to close');
  assert.deepEqual(ends, [GOING_AWAY, GOING_AWAY, GOING_AWAY, GOING_AWAY, GOING_AWAY],
                   `close codes of CDP (busy), CDP (idle), RFB, frames, preview\n${first.logTail(20)}`);
  // Every message before the close frame arrived whole: none was cut or corrupted.
  await Promise.all(busy.state.loops);
  assert.equal(busy.state.failed?.message ?? null, null);
  const result = await stopped;
  assert.equal(result.code, 0, `cabind exits 0 after SIGTERM\n${first.logTail(20)}`);

  // The clients come back to the next cabind, as 1001 tells them to.
  const next = await startCabind({ stateDir: first.stateDir, runDir: first.runDir, key: first.key });
  cleanup.push(() => next.stop());
  const again = await Cdp.connect(s.cdp_url.replace(first.hostPort, next.hostPort));
  try {
    assert.ok((await again.send('Browser.getVersion')).product);
  } finally {
    await again.close();
  }
  await next.deleteSession(s.id);
  await waitForNoLeftovers(s.id, first.runDir);
  swept = true;
});

test('with --on-shutdown delete the CDP client hears 1001 before its session ends', async () => {
  const server = await startCabind();
  cleanup.push(() => server.stop());
  const s = await server.createSession({});
  const busy = await busyCdp(s.cdp_url, { shots: 2 });
  const closed = closing(busy.cdp.ws);
  await waitFor(() => busy.state.shots >= 2, { timeoutMs: 20000, what: 'screenshots streaming' });
  const stopped = server.stop({ keep: true });
  assert.deepEqual(await withDeadline(closed, 10000, 'the CDP client to close'), GOING_AWAY);
  await Promise.all(busy.state.loops);
  assert.equal(busy.state.failed?.message ?? null, null);
  assert.equal((await stopped).code, 0);
  await waitForNoLeftovers(s.id, server.runDir);
});
