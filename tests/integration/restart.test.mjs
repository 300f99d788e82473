// Restarting cabind loses no session: sandboxes outlive a cabind that is killed (-9) or stopped
// (SIGTERM with --on-shutdown keep), and the next cabind on the same state and run directories
// adopts them. Clients come back with the URLs and tokens they hold (on the new listener), and
// find the page, its JavaScript state and its cookies as they were. A session whose lifetime ran
// out meanwhile ends as "timeout", and a sandbox the store does not know is killed.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, test } from 'node:test';

import {
  Cdp, api, containerCgroup, leftovers, removeServerDirs, startCabind, waitFor, waitForNoLeftovers,
  withDeadline,
} from './helpers.mjs';
import { startEgressWorld } from './egress_world.mjs';
import { exec, openPreview } from './preview_helpers.mjs';
import { markPage, on, readPage } from './restart_world.mjs';

const cleanup = [];
after(async () => {
  for (const fn of cleanup.reverse()) await fn();
});

// Starts the next cabind on `first`'s directories; stopped (and its directories removed) after
// the file.
async function restart(first, args = []) {
  const next = await startCabind({
    stateDir: first.stateDir, runDir: first.runDir, key: first.key, args,
  });
  cleanup.push(() => next.stop());
  return next;
}

// The pids of a session's sandbox: every process whose command line or cgroup names it.
function sandboxPids(id) {
  return leftovers(id).filter((l) => l.startsWith('process ')).map((l) => Number(l.split(' ')[1]));
}

test('kill -9 of cabind ends no session: the next cabind adopts it as it was', async () => {
  const first = await startCabind();
  cleanup.push(() => removeServerDirs(first));
  const s = await first.createSession({});
  const view = await first.api('POST', `/v1/sessions/${s.id}/tokens`, { scope: 'view', ttl_s: 600 });
  assert.equal(view.status, 201, view.text);
  await markPage(s.cdp_url);
  // A server in the sandbox, and a preview of it opened as a browser opens one.
  const served = await exec(first, s.id, ['sh', '-c', 'mkdir -p site && echo kept > site/f.txt && ' +
    '(setsid python3 -m http.server 8001 --bind 127.0.0.1 --directory site > /dev/null 2>&1 < /dev/null &)']);
  assert.equal(served.exit_code, 0, JSON.stringify(served));
  await waitFor(async () => (await exec(first, s.id, [
    'python3', '-c', 'import socket; socket.create_connection(("127.0.0.1", 8001), 1)',
  ])).exit_code === 0, { timeoutMs: 20000, intervalMs: 200, what: 'the server in the sandbox' });
  const preview = await openPreview(first, s.id, 8001, 'path');
  const cdp = await Cdp.connect(s.cdp_url);
  const before = sandboxPids(s.id);
  assert.ok(before.length >= 3, `the sandbox's processes: ${before}`);

  await first.crash();
  await withDeadline(cdp.closed, 5000, 'CDP to close when cabind dies');
  // Nothing of the sandbox died with cabind.
  assert.deepEqual(sandboxPids(s.id).sort(), before.sort());

  const next = await restart(first);
  const r = await next.api('GET', `/v1/sessions/${s.id}`);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.status, 'running', r.text);
  assert.equal(r.json.expires_at, s.expires_at, 'the lifetime is the one it had');

  // The cdp_url and its token, as handed out before the restart.
  const page = await readPage(on(next, s.cdp_url));
  assert.deepEqual(page, { title: 'before restart', counter: 42, cookies: ['who=kept'] });
  // The agent answers again: a command, a screenshot, a live view token minted before.
  const ran = await next.api('POST', `/v1/sessions/${s.id}/exec`, { argv: ['echo', 'again'] });
  assert.equal(ran.status, 200, ran.text);
  assert.equal(ran.json.stdout, 'again\n');
  const shot = await next.api('GET', `/v1/sessions/${s.id}/screenshot`);
  assert.equal(shot.status, 200, shot.text);
  assert.equal(shot.headers.get('content-type'), 'image/png');
  const live = await api(next.base, null, 'GET',
                         `/v1/sessions/${s.id}/live?token=${encodeURIComponent(view.json.token)}`);
  assert.equal(live.status, 200, live.text.slice(0, 200));

  // The preview's cookie, handed out before the restart, still opens it.
  const file = await fetch(`${next.base}${preview.prefix}/f.txt`, { headers: { cookie: preview.cookie } });
  assert.equal(file.status, 200);
  assert.equal(await file.text(), 'kept\n');

  // Its end leaves nothing, as any session's does.
  await next.deleteSession(s.id);
  await waitForNoLeftovers(s.id, first.runDir);
});

test('a container runtime\'s stop of cabind\'s container ends no session: its sandboxes live in cgroups of their own',
     async () => {
  // What Kubernetes does to a node's pod: every process in the container's cgroup killed.
  const container = containerCgroup();
  cleanup.push(() => container.stop());
  const first = await startCabind();
  cleanup.push(() => removeServerDirs(first));
  container.join(first.pid);
  const s = await first.createSession({});
  await markPage(s.cdp_url);
  const before = sandboxPids(s.id);
  assert.ok(before.length >= 3, `the sandbox's processes: ${before}`);
  assert.deepEqual(container.pids(), [first.pid], 'only cabind is in the container\'s cgroup');

  await container.stop();
  await first.exited;
  assert.deepEqual(sandboxPids(s.id).sort(), before.sort(), 'the sandbox outlived its container');
  const next = await restart(first);
  assert.equal((await next.api('GET', `/v1/sessions/${s.id}`)).json.status, 'running');
  assert.deepEqual(await readPage(on(next, s.cdp_url)),
                   { title: 'before restart', counter: 42, cookies: ['who=kept'] });
  await next.deleteSession(s.id);
  await waitForNoLeftovers(s.id, first.runDir);
});

test('SIGTERM with --on-shutdown keep leaves sessions, running and paused, to the next cabind',
     async () => {
  const first = await startCabind({ args: ['--on-shutdown', 'keep'] });
  cleanup.push(() => removeServerDirs(first));
  const running = await first.createSession({});
  const paused = await first.createSession({});
  await markPage(running.cdp_url);
  const p = await first.api('POST', `/v1/sessions/${paused.id}/pause`);
  assert.equal(p.status, 200, p.text);
  const cdp = await Cdp.connect(running.cdp_url);

  const result = await first.stop({ keep: true });
  assert.equal(result.code, 0, `cabind exits 0 after SIGTERM\n${first.logTail(20)}`);
  await withDeadline(cdp.closed, 5000, 'client streams to close at shutdown');
  assert.ok(sandboxPids(running.id).length >= 3, 'the running sandbox is left running');

  const next = await restart(first);
  assert.equal((await next.api('GET', `/v1/sessions/${running.id}`)).json.status, 'running');
  assert.deepEqual(await readPage(on(next, running.cdp_url)),
                   { title: 'before restart', counter: 42, cookies: ['who=kept'] });
  assert.equal((await next.api('GET', `/v1/sessions/${paused.id}`)).json.status, 'paused');
  const resumed = await next.api('POST', `/v1/sessions/${paused.id}/resume`);
  assert.equal(resumed.status, 200, resumed.text);
  const c = await Cdp.connect(on(next, paused.cdp_url));
  try {
    const v = await c.send('Browser.getVersion');
    assert.ok(v.product, 'the resumed browser answers');
  } finally {
    await c.close();
  }
  for (const id of [running.id, paused.id]) {
    await next.deleteSession(id);
    await waitForNoLeftovers(id, first.runDir);
  }
});

test('a session whose lifetime ran out while no cabind ran ends as timeout, and nothing is left',
     async () => {
  const first = await startCabind();
  cleanup.push(() => removeServerDirs(first));
  // The lifetime counts from the create, which takes seconds on a busy machine: long enough that
  // the session is still running when cabind dies.
  const s = await first.createSession({ timeout_s: 8, idle_timeout_s: 0 });
  await first.crash();
  await waitFor(() => Date.parse(s.expires_at) + 1000 < Date.now(),
                { timeoutMs: 15000, what: 'the session\'s lifetime to pass' });
  assert.ok(sandboxPids(s.id).length > 0, 'its sandbox ran on while cabind was down');
  const next = await restart(first);
  const r = await next.api('GET', `/v1/sessions/${s.id}`);
  assert.equal(r.json.status, 'ended', r.text);
  assert.equal(r.json.end_reason, 'timeout');
  await waitForNoLeftovers(s.id, first.runDir);
});

test('a sandbox the store does not know is killed at start-up', async () => {
  const first = await startCabind();
  cleanup.push(() => removeServerDirs(first));
  const s = await first.createSession({});
  await first.crash();
  assert.ok(sandboxPids(s.id).length > 0);
  // Another state dir: its store has no record of the session, but the run dir is the same.
  const stranger = await startCabind({ runDir: first.runDir, key: first.key });
  cleanup.push(() => stranger.stop());
  await waitForNoLeftovers(s.id, first.runDir);
  assert.equal((await stranger.api('GET', `/v1/sessions/${s.id}`)).status, 404);
});

test('a sandbox that died while no cabind ran is recorded as lost', async () => {
  const first = await startCabind();
  cleanup.push(() => removeServerDirs(first));
  const s = await first.createSession({});
  await first.crash();
  for (const pid of sandboxPids(s.id)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already: killing the launcher takes the rest
    }
  }
  await waitFor(() => sandboxPids(s.id).length === 0, { what: 'the sandbox to die' });
  const next = await restart(first);
  const r = await next.api('GET', `/v1/sessions/${s.id}`);
  assert.equal(r.json.status, 'failed', r.text);
  assert.match(r.json.end_reason, /^sandbox lost while the server was down: /);
  await waitForNoLeftovers(s.id, first.runDir);
});

test('an adopted session keeps its way out: its live policy, its secrets and the CA its sandbox trusts',
     async () => {
  const world = await startEgressWorld();
  cleanup.push(() => world.close());
  const { servers, tlsRequests } = world;
  const first = await startCabind({ args: world.cabindArgs() });
  cleanup.push(() => removeServerDirs(first));
  const value = `ghp_${Math.random().toString(36).slice(2)}Zq9`;
  const s = await first.createSession({
    network: {
      mode: 'allowlist', allow: [{ host: 'site.test', ports: [servers.tlsPort] }],
      secrets: [{ name: 'gh', value, hosts: ['site.test'], ports: [servers.tlsPort], format: 'Bearer {value}' }],
    },
  });
  // Changed live, before the restart: other.test is allowed too.
  const put = await first.api('PUT', `/v1/sessions/${s.id}/network`, {
    mode: 'allowlist',
    allow: [{ host: 'site.test', ports: [servers.tlsPort] },
            { host: 'other.test', ports: [servers.otherPort] }],
    secrets: [{ name: 'gh', value, hosts: ['site.test'], ports: [servers.tlsPort], format: 'Bearer {value}' }],
  });
  assert.equal(put.status, 200, put.text);
  const placeholder = put.json.secrets[0].placeholder;
  const curl = async (server, args) => (await exec(server, s.id,
    ['curl', '-sS', '--max-time', '10', '-o', '/dev/null', '-w', '%{http_code}', ...args])).stdout;
  const injected = async (server) => {
    tlsRequests.length = 0;
    const code = await curl(server, ['-H', `Authorization: ${placeholder}`,
                                     `https://site.test:${servers.tlsPort}/`]);
    return [code, tlsRequests[0]?.headers.authorization];
  };
  assert.deepEqual(await injected(first), ['200', value]);

  await first.crash();
  const next = await restart(first, world.cabindArgs());
  // The same policy, the placeholder the sandbox holds, and the CA it trusts (curl checks it).
  const read = await next.api('GET', `/v1/sessions/${s.id}/network`);
  assert.deepEqual(read.json.allow.map((r) => r.host), ['site.test', 'other.test']);
  assert.equal(read.json.secrets[0].placeholder, placeholder);
  assert.deepEqual(await injected(next), ['200', value]);
  assert.equal(await curl(next, [`http://other.test:${servers.otherPort}/`]), '200');
  assert.equal(await curl(next, [`http://site.test:${servers.sitePort}/`]), '403');
  // The secret is not in the new cabind's files either: the handoff is sealed.
  const found = execFileSync('sh', ['-c', `grep -rl -- '${value}' '${first.stateDir}' || true`])
    .toString();
  assert.equal(found, '');
  await next.deleteSession(s.id);
  await waitForNoLeftovers(s.id, first.runDir);
});

