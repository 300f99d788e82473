// Resource abuse from two sandboxes of one tenant, all at once: 200 uploads to a host that never
// reads, a flood of refused connections into the network log, a full /tmp, a memory hog, CPU
// spinners, a recording, and creates past the tenant's session and memory budgets. Meanwhile a
// session of another tenant is created, answers a screenshot and a command, and loads a page;
// cabind's memory and the state dir's growth stay under the bounds docs/security.md states.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import { test } from 'node:test';

import { chromium } from 'playwright-core';

import { slowUploads } from './egress_world.mjs';
import { startCabind } from './helpers.mjs';

const rss = (pid) => Number(/^VmRSS:\s+(\d+) kB$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;
const du = (dir) => Number(execFileSync('du', ['-sb', dir]).toString().split('\t')[0]);

test('two abusive sandboxes of one tenant leave another tenant working, and cabind and its disk bounded', async () => {
  const held = [];
  const tarpit = net.createServer((c) => { c.pause(); held.push(c); });
  tarpit.listen(0, '127.0.0.1');
  await new Promise((r) => tarpit.once('listening', r));
  const port = tarpit.address().port;
  const server = await startCabind({
    args: ['--egress-resolve', 'tarpit.test=127.0.0.1', '--egress-allow-host-cidr', '127.0.0.1/32',
           '--max-sandbox-memory-mb', '2048'],
  });
  try {
    const admin = (method, p, body) => server.api(method, p, body);
    const mint = async (body) => {
      const r = await admin('POST', '/v1/keys', body);
      assert.equal(r.status, 201, r.text);
      return (method, p, b) => server.api(method, p, b, { key: r.json.key });
    };
    const abuser = await mint({ name: 'abuser', max_sessions: 2, max_memory_mb: 1024 });
    const other = await mint({ name: 'other', max_sessions: 2 });
    const create = async (as, spec) => {
      const r = await as('POST', '/v1/sessions', spec);
      assert.equal(r.status, 201, r.text);
      return r.json;
    };
    const run = (as, id, argv, timeout_ms = 60000) =>
      as('POST', `/v1/sessions/${id}/exec`, { argv, timeout_ms });

    const uploader = await create(abuser, {
      resources: { memory_mb: 512 },
      network: { mode: 'allowlist', allow: [{ host: 'tarpit.test', ports: [port] }] },
    });
    const flooder = await create(abuser, { resources: { memory_mb: 512 } });
    // Past its budgets: a third session, and more memory than it has left.
    const third = await abuser('POST', '/v1/sessions', {});
    assert.equal(third.status, 429, third.text);
    assert.equal(third.json.error.code, 'quota_sessions');
    const beyond = await admin('POST', '/v1/sessions', { resources: { memory_mb: 4096 } });
    assert.equal(beyond.status, 400, beyond.text);
    assert.match(beyond.json.error.message, /--max-sandbox-memory-mb/);

    const rssBefore = rss(server.pid);
    const diskBefore = du(server.stateDir);
    const recording = await abuser('POST', `/v1/sessions/${uploader.id}/recordings`, { max_mb: 1, fps: 5 });
    assert.equal(recording.status, 201, recording.text);

    const uploads = slowUploads(`tarpit.test:${port}`, 10);
    const flood = `
import socket, time
end = time.time() + 10
n = 0
while time.time() < end:
    try:
        c = socket.create_connection(("127.0.0.1", 3128), 2)
        c.sendall(("CONNECT host%d.example:443 HTTP/1.1\\r\\n\\r\\n" % n).encode())
        c.recv(256)
        c.close()
    except OSError:
        pass
    n += 1
print(n)
`;
    const abuses = [
      run(abuser, uploader.id, ['python3', '-c', uploads]),
      run(abuser, flooder.id, ['python3', '-c', flood]),
      run(abuser, flooder.id, ['sh', '-c', 'dd if=/dev/zero of=/tmp/fill bs=1M count=4096 2>/dev/null; true']),
      run(abuser, flooder.id, ['python3', '-c', 'x = []\nwhile True: x.append(b"y" * (1 << 20))']),
      run(abuser, uploader.id, ['sh', '-c', 'for i in 1 2; do timeout 10 sh -c "while :; do :; done" & done; wait']),
    ];
    let peak = rssBefore;
    const watch = setInterval(() => { peak = Math.max(peak, rss(server.pid)); }, 200);

    // Meanwhile another tenant's session is made and works.
    const mine = await create(other, { start_url: 'data:text/html,<title>fine</title><h1 id=x>fine</h1>' });
    const shot = await other('POST', `/v1/sessions/${mine.id}/computer`, { actions: [{ action: 'screenshot' }] });
    assert.equal(shot.status, 200, shot.text);
    const echoed = await run(other, mine.id, ['echo', 'working']);
    assert.equal(echoed.json.stdout, 'working\n');
    const browser = await chromium.connectOverCDP(mine.cdp_url);
    try {
      const page = browser.contexts()[0].pages()[0];
      await page.goto('data:text/html,<p id=p>loaded</p>');
      assert.equal(await page.textContent('#p'), 'loaded');
    } finally {
      await browser.close();
    }
    assert.equal((await fetch(`${server.base}/healthz`)).status, 200);

    const results = await Promise.all(abuses);
    clearInterval(watch);
    // The abuser's own sandbox may not survive its memory hog (its cgroup's OOM killer picks
    // what it picks): its commands end or fail, and nothing of it reaches anyone else.
    for (const r of results) assert.ok([200, 502, 503].includes(r.status), r.text);
    const stopped = await abuser('POST', `/v1/sessions/${uploader.id}/recordings/${recording.json.id}/stop`);
    assert.ok([200, 404, 409].includes(stopped.status), stopped.text);
    for (const s of [uploader, flooder]) {
      const d = await abuser('DELETE', `/v1/sessions/${s.id}`);
      assert.ok([200, 404].includes(d.status), d.text);
    }
    // Stated bounds: request bodies are never held (the sockets' buffers are the kernel's);
    // a network log is at most 16 MiB, a recording its max_mb and 8 MiB more.
    const grew = peak - rssBefore;
    assert.ok(grew < 128 << 20, `cabind grew by ${(grew / 1048576).toFixed(1)} MiB`);
    const disk = du(server.stateDir) - diskBefore;
    assert.ok(disk < 2 * (16 << 20) + (9 << 20) + (4 << 20), `the state dir grew by ${(disk / 1048576).toFixed(1)} MiB`);
    console.log(`cabind grew by ${(grew / 1048576).toFixed(1)} MiB, the state dir by ${(disk / 1048576).toFixed(1)} MiB`);
  } finally {
    for (const c of held) c.destroy();
    tarpit.close();
    await server.stop();
  }
});
