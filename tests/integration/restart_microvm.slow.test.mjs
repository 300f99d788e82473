// Restarting cabind loses no microVM session: QEMU outlives a cabind that is killed (-9), and the
// next cabind adopts the VM, re-dials its agent through the same forwarded port and reconnects its
// monitor; the page, its JavaScript state and its cookies are as they were. Then a kill -9 of
// QEMU fails the session at once, saying so. Slow: a guest boots in tens of seconds under TCG.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';

import {
  removeServerDirs, startCabind, waitFor, waitForNoLeftovers, withDeadline,
} from './helpers.mjs';
import { markPage, on, readPage } from './restart_world.mjs';

const BOOT_MS = 240000;
const cleanup = [];
after(async () => {
  for (const fn of cleanup.reverse()) await fn();
});

// The QEMU processes of a session: they run in its run dir. (cabin-vmm-wrap, QEMU's parent when
// jailed, shares the dir and names QEMU in its arguments, but is not QEMU.)
function qemuOf(id) {
  let out = '';
  try {
    out = execFileSync('pgrep', ['-f', 'qemu-system'], { encoding: 'utf8' });
  } catch {
    return [];
  }
  return out.split('\n').filter(Boolean).filter((pid) => {
    try {
      return fs.readlinkSync(`/proc/${pid}/cwd`).includes(id) &&
        path.basename(fs.readlinkSync(`/proc/${pid}/exe`)).startsWith('qemu-system');
    } catch {
      return false;
    }
  }).map(Number);
}

test('kill -9 of cabind ends no microVM session: the next cabind adopts the running VM',
     { timeout: BOOT_MS + 180000 }, async () => {
  const first = await startCabind();
  cleanup.push(() => removeServerDirs(first));
  const s = await withDeadline(first.createSession({
    driver: 'microvm',
    resources: { vcpus: 2, memory_mb: 2048 },
    start_url: 'data:text/html,<title>vm-start</title>',
  }), BOOT_MS, 'a microVM session to start');
  await markPage(s.cdp_url);
  const qemu = qemuOf(s.id);
  assert.ok(qemu.length > 0, 'QEMU runs');

  await first.crash();
  assert.deepEqual(qemuOf(s.id), qemu, 'QEMU runs on without cabind');

  const next = await startCabind({ stateDir: first.stateDir, runDir: first.runDir, key: first.key });
  cleanup.push(() => next.stop());
  const r = await next.api('GET', `/v1/sessions/${s.id}`);
  assert.equal(r.json.status, 'running', r.text);
  assert.deepEqual(await readPage(on(next, s.cdp_url)),
                   { title: 'before restart', counter: 42, cookies: ['who=kept'] });
  const exec = await next.api('POST', `/v1/sessions/${s.id}/exec`,
                              { argv: ['echo', 'adopted'], timeout_ms: 20000 });
  assert.equal(exec.status, 200, exec.text);
  assert.equal(exec.json.stdout, 'adopted\n');
  // QEMU's monitor answers the new cabind.
  for (const verb of ['pause', 'resume']) {
    const p = await next.api('POST', `/v1/sessions/${s.id}/${verb}`);
    assert.equal(p.status, 200, `${verb}: ${p.text}`);
  }
  // QEMU killed under the adopting cabind: the session fails within 2 s, saying what died and
  // how (the wrap says it on the console, as the new cabind is not its parent), and nothing is
  // left.
  for (const pid of qemuOf(s.id)) process.kill(pid, 'SIGKILL');
  const ended = await waitFor(async () => {
    const g = await next.api('GET', `/v1/sessions/${s.id}`);
    return g.json.status === 'failed' && g.json;
  }, { timeoutMs: 2000, intervalMs: 50, what: 'the session to fail when QEMU is killed' });
  assert.equal(ended.end_reason, 'sandbox exited: qemu killed by signal 9 (Killed)');
  await waitForNoLeftovers(s.id, `${first.runDir}-vm`);
  await waitFor(() => qemuOf(s.id).length === 0, { what: 'QEMU to exit' });
});
