// A sandbox receives nothing of cabind's: no process of a session (the launcher, PID 1, the
// agent, Xvfb, Chromium, a command run through exec) holds a socket or pipe that cabind holds,
// even while other clients and another session's agent connection are open as it starts.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { once } from 'node:events';
import { test } from 'node:test';

import { openDescriptors, sessionPids, useCabind, waitFor } from './helpers.mjs';

const ctx = useCabind();

// Sockets and pipes are the kernel objects a descriptor shares; paths are shared by name only.
function sharedObjects(fds) {
  return new Set([...fds.values()].filter((t) => /^(socket|pipe):\[\d+\]$/.test(t)));
}

function comm(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return '?';
  }
}

function runningIn(sessionId, name) {
  return sessionPids(sessionId).some((pid) => comm(pid) === name);
}

test('no process of a sandbox holds a socket or pipe of cabind', async () => {
  const server = ctx.server;
  // A client connection that stays open while the sandbox starts.
  const idle = net.connect(server.port, '127.0.0.1');
  await once(idle, 'connect');
  // Another session kept busy: cabind holds an agent connection to it throughout.
  const busy = await server.createSession({});
  const busyExec = server.api('POST', `/v1/sessions/${busy.id}/exec`, {
    argv: ['sleep', '60'], timeout_ms: 90000,
  }).catch((e) => e);
  let s;
  let exec;
  try {
    await waitFor(() => runningIn(busy.id, 'sleep'), { what: 'the busy session to run sleep' });

    s = await server.createSession({});
    exec = server.api('POST', `/v1/sessions/${s.id}/exec`, {
      argv: ['sleep', '60'], timeout_ms: 90000,
    }).catch((e) => e);
    await waitFor(() => runningIn(s.id, 'sleep'), { what: 'the exec to run in the sandbox' });

    const cabind = sharedObjects(openDescriptors(server.pid));
    assert.ok(cabind.size >= 3, `cabind holds its listener and connections: ${[...cabind]}`);
    const pids = sessionPids(s.id);
    const launcher = pids.find((pid) => comm(pid) === 'cabin-sandbox' &&
      fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')[1] ===
        String(server.pid));
    assert.ok(launcher, 'the session has a launcher, a child of cabind');
    // The one pipe meant to pass: cabind reads the sandbox's stdout and stderr from it.
    const logPipe = openDescriptors(launcher).get(1);
    const names = new Set();
    const leaks = [];
    for (const pid of pids) {
      names.add(comm(pid));
      for (const [fd, target] of openDescriptors(pid)) {
        if (target !== logPipe && cabind.has(target)) {
          leaks.push(`${comm(pid)} (pid ${pid}) fd ${fd} -> ${target}`);
        }
      }
    }
    for (const name of ['cabin-sandbox', 'cabin-agent', 'Xvfb', 'chromium', 'sleep']) {
      assert.ok(names.has(name), `${name} was among the processes checked: ${[...names]}`);
    }
    assert.deepEqual(leaks, [], 'descriptors of cabind inside the sandbox');
  } finally {
    idle.destroy();
    // Ending the sessions ends the commands, and with them the requests.
    for (const id of [busy.id, s?.id].filter(Boolean)) await server.api('DELETE', `/v1/sessions/${id}`);
    await Promise.all([busyExec, exec]);
  }
});
