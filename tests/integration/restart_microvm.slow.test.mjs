// Restarting cabind loses no microVM session: QEMU outlives a cabind that is killed (-9) with its
// container (every process in its cgroup), and the next cabind adopts the VM, re-dials its agent
// through the same forwarded port and reconnects its monitor; the page, its JavaScript state and
// its cookies are as they were. The session then hibernates, survives another restart as a file,
// and wakes where it was. Then a kill -9 of QEMU fails the session at once, saying so. Slow: a
// guest boots in tens of seconds under TCG.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';

import {
  containerCgroup, removeServerDirs, startCabind, waitFor, waitForNoLeftovers, withDeadline,
} from './helpers.mjs';
import { inPage, markPage, on, readPage } from './restart_world.mjs';

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
  // cabind runs in a cgroup of its own, as in a container; its stop kills that cgroup whole, as
  // a container runtime does, and QEMU, in a cgroup of its own, outlives it.
  const container = containerCgroup();
  cleanup.push(() => container.stop());
  const first = await startCabind();
  cleanup.push(() => removeServerDirs(first));
  container.join(first.pid);
  const s = await withDeadline(first.createSession({
    driver: 'microvm',
    resources: { vcpus: 2, memory_mb: 2048 },
    start_url: 'data:text/html,<title>vm-start</title>',
  }), BOOT_MS, 'a microVM session to start');
  await markPage(s.cdp_url);
  const qemu = qemuOf(s.id);
  assert.ok(qemu.length > 0, 'QEMU runs');

  assert.deepEqual(container.pids(), [first.pid], 'only cabind is in the container\'s cgroup');
  await container.stop();
  await first.exited;
  assert.deepEqual(qemuOf(s.id), qemu, 'QEMU runs on without cabind and its container');

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

  // Hibernated: the machine is saved to disk and QEMU goes, its memory with it. A page's timer
  // that ticked until then ticks on after the resume, from where it was, and a cabind that
  // crashed in between loses nothing.
  const ticks = async (server) => inPage(on(server, s.cdp_url), 'window.ticks');
  await inPage(on(next, s.cdp_url),
               'window.ticks = 0; setInterval(() => window.ticks++, 20); true');
  await waitFor(async () => (await ticks(next)) > 10, { what: 'the page\'s timer to tick' });
  const h = await next.api('POST', `/v1/sessions/${s.id}/pause`, { mode: 'hibernate' });
  assert.equal(h.status, 200, h.text);
  assert.equal(h.json.status, 'paused');
  assert.equal(h.json.pause_mode, 'hibernate');
  assert.deepEqual(qemuOf(s.id), [], 'no QEMU holds the hibernated machine');
  const paused = await next.api('POST', `/v1/sessions/${s.id}/exec`, { argv: ['true'] });
  assert.equal(paused.status, 409, paused.text);
  assert.equal(paused.json.error.code, 'session_paused');
  const again = await next.api('POST', `/v1/sessions/${s.id}/pause`);
  assert.equal(again.json.pause_mode, 'hibernate', 'a pause of a hibernated session leaves it so');

  await next.crash();
  const third = await startCabind({ stateDir: first.stateDir, runDir: first.runDir, key: first.key });
  cleanup.push(() => third.stop());
  const g = await third.api('GET', `/v1/sessions/${s.id}`);
  assert.equal(g.json.status, 'paused', g.text);
  assert.equal(g.json.pause_mode, 'hibernate');
  const resumed = await third.api('POST', `/v1/sessions/${s.id}/resume`);
  assert.equal(resumed.status, 200, resumed.text);
  assert.equal(resumed.json.status, 'running');
  assert.equal(resumed.json.pause_mode, undefined);
  assert.equal(qemuOf(s.id).length, 1, 'one QEMU runs the machine again');
  const atResume = await ticks(third);
  assert.ok(atResume > 10, `the timer goes on from where it was (${atResume})`);
  await waitFor(async () => (await ticks(third)) > atResume + 10, { what: 'the timer to tick on' });
  assert.deepEqual(await readPage(on(third, s.cdp_url)),
                   { title: 'before restart', counter: 43, cookies: ['who=kept'] });
  // Its clock is the host's again, not the one it stopped at.
  const clock = await third.api('POST', `/v1/sessions/${s.id}/exec`,
                                { argv: ['date', '+%s'], timeout_ms: 20000 });
  assert.equal(clock.status, 200, clock.text);
  assert.ok(Math.abs(Number(clock.json.stdout) - Date.now() / 1000) < 2, clock.json.stdout);


  // The woken VM is adopted like any other by the cabind after.
  await third.crash();
  const fourth = await startCabind({ stateDir: first.stateDir, runDir: first.runDir, key: first.key });
  cleanup.push(() => fourth.stop());
  assert.equal((await fourth.api('GET', `/v1/sessions/${s.id}`)).json.status, 'running');
  assert.equal(await inPage(on(fourth, s.cdp_url), 'window.kept.counter'), 43);

  // QEMU killed under the adopting cabind: the session fails within 2 s, saying what died and
  // how (the wrap says it on the console, as the new cabind is not its parent), and nothing is
  // left.
  for (const pid of qemuOf(s.id)) process.kill(pid, 'SIGKILL');
  const ended = await waitFor(async () => {
    const r2 = await fourth.api('GET', `/v1/sessions/${s.id}`);
    return r2.json.status === 'failed' && r2.json;
  }, { timeoutMs: 2000, intervalMs: 50, what: 'the session to fail when QEMU is killed' });
  assert.equal(ended.end_reason, 'sandbox exited: qemu killed by signal 9 (Killed)');
  await waitForNoLeftovers(s.id, `${first.runDir}-vm`);
  await waitFor(() => qemuOf(s.id).length === 0, { what: 'QEMU to exit' });
});
