// A warm pool of microVMs: the pool boots a guest ahead (tens of seconds under TCG), and a create
// that claims it answers as soon as the guest's browser is at the session's start page, with its
// own tokens and network policy; the pool boots the next one behind it, and shutdown stops both.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, test } from 'node:test';

import { Cdp, startCabind, waitFor, waitForNoLeftovers } from './helpers.mjs';

const cleanup = [];
after(async () => {
  for (const fn of cleanup.reverse()) await fn();
});

const BOOT_MS = 240000;

async function pool(server) {
  return (await server.api('GET', '/v1/info')).json.pools[0];
}

test('a microVM pool hands a booted guest to a create, and boots the next', async () => {
  const server = await startCabind({ args: ['--pool', 'microvm:1024x768:1'] });
  cleanup.push(() => server.stop());
  await waitFor(async () => (await pool(server)).ready === 1,
                { timeoutMs: BOOT_MS, intervalMs: 500, what: 'the pool\'s guest to boot' });

  const pooled = fs.readdirSync(`${server.runDir}-vm`).filter((n) => n.startsWith('ses_'));
  const t0 = Date.now();
  const s = await server.createSession({
    driver: 'microvm', resolution: { width: 1024, height: 768 },
    start_url: 'data:text/html,<title>from the pool</title>',
  });
  process.stderr.write(`microVM pool claim: ${Date.now() - t0} ms\n`);
  assert.equal((await pool(server)).claims, 1);
  assert.ok(pooled.includes(s.id), 'the session is the pooled guest');
  const cdp = await Cdp.connect(s.cdp_url);
  try {
    const { targetInfos } = await cdp.send('Target.getTargets');
    assert.equal(targetInfos.find((t) => t.type === 'page').title, 'from the pool');
  } finally {
    await cdp.close();
  }
  const ran = await server.api('POST', `/v1/sessions/${s.id}/exec`, { argv: ['uname', '-n'] });
  assert.equal(ran.status, 200, ran.text);

  await waitFor(async () => (await pool(server)).ready === 1,
                { timeoutMs: BOOT_MS, intervalMs: 500, what: 'the pool to boot the next guest' });
  await server.deleteSession(s.id);
  await waitForNoLeftovers(s.id, server.runDir, 30000);
  const result = await server.stop({ keep: true });
  assert.equal(result.code, 0);
});

// QEMU processes whose directory is under `runDir`'s microVM dir.
function qemusUnder(runDir) {
  const out = [];
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      if (!fs.readlinkSync(`/proc/${pid}/exe`).includes('qemu-system')) continue;
      if (fs.readlinkSync(`/proc/${pid}/cwd`).startsWith(`${runDir}-vm/`)) out.push(Number(pid));
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return out;
}

test('a shutdown while the pool boots its guest leaves no QEMU behind', async () => {
  const server = await startCabind({ args: ['--pool', 'microvm:1024x768:1'] });
  cleanup.push(() => server.stop());
  await waitFor(() => qemusUnder(server.runDir).length === 1,
                { timeoutMs: 60000, intervalMs: 100, what: 'the pool\'s QEMU to start' });
  assert.equal((await pool(server)).ready, 0, 'still booting');
  const pids = qemusUnder(server.runDir);
  const result = await server.stop({ keep: true });
  assert.equal(result.code, 0);
  await waitFor(() => pids.every((pid) => !fs.existsSync(`/proc/${pid}`)),
                { timeoutMs: 10000, what: 'the pool\'s QEMU to be gone' });
  fs.rmSync(server.runDir, { recursive: true, force: true });
  fs.rmSync(`${server.runDir}-vm`, { recursive: true, force: true });
  fs.rmSync(server.stateDir, { recursive: true, force: true });
});
