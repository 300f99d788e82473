// The namespace sandbox's walls, seen from inside through the exec API: what the seccomp filters
// deny to exec'd commands, what of the host's /etc and cgroups shows, and that Chromium still runs.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { useCabind } from './helpers.mjs';

const ctx = useCabind();

// Each probe prints one JSON line; errno 0 means the call succeeded.
const PROBE_CALLS = String.raw`
import ctypes, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def errno_of(rc):
    return 0 if rc >= 0 else ctypes.get_errno()
def sock(family, kind, proto=0):
    try:
        socket.socket(family, kind, proto).close()
        return 0
    except OSError as e:
        return e.errno
CLONE_NEWUSER, CLONE_NEWNET, SIGCHLD = 0x10000000, 0x40000000, 17
out = {}
out['vsock'] = sock(40, socket.SOCK_STREAM)
out['clone3'] = errno_of(libc.syscall(435, None, 0))
pid = libc.syscall(56, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
if pid == 0:
    os._exit(0)
out['clone_newuser'] = errno_of(pid)
if pid > 0:
    os.waitpid(pid, 0)
out['unshare'] = errno_of(libc.unshare(CLONE_NEWUSER | CLONE_NEWNET))
# What a new user and net namespace would have given: raw packets (and nf_tables over netlink).
out['packet'] = sock(socket.AF_PACKET, socket.SOCK_RAW)
fd = os.open('/proc/self/ns/net', os.O_RDONLY)
out['setns'] = errno_of(libc.setns(fd, 0))
# glibc still starts programs: posix_spawn falls back from clone3 to clone.
import subprocess
out['spawn'] = subprocess.run(['/bin/true']).returncode
print(json.dumps(out))
`;

async function exec(id, argv) {
  const r = await ctx.server.api('POST', `/v1/sessions/${id}/exec`, { argv });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

describe('inside a namespace sandbox', () => {
  let s;
  // Planted in the host's /etc before the session starts; must not show inside.
  const secret = `/etc/cabin-test-secret-${randomBytes(6).toString('hex')}`;
  before(async () => {
    fs.writeFileSync(secret, 'host only\n', { mode: 0o644 });
    s = await ctx.server.createSession({});
  });
  after(async () => {
    fs.rmSync(secret, { force: true });
    if (s) await ctx.server.api('DELETE', `/v1/sessions/${s.id}`);
  });

  test('exec\'d commands get no vsock, no new user namespace, no clone3, no setns', async () => {
    const r = await exec(s.id, ['/usr/bin/python3', '-c', PROBE_CALLS]);
    assert.equal(r.exit_code, 0, r.stderr);
    const got = JSON.parse(r.stdout);
    assert.deepEqual(got, {
      vsock: 97, // EAFNOSUPPORT
      clone3: 38, // ENOSYS
      clone_newuser: 1, // EPERM
      unshare: 1,
      packet: 1,
      setns: 1,
      spawn: 0,
    });
  });

  test('only the chosen parts of the host /etc show; a file planted there does not', async () => {
    assert.ok(fs.existsSync(secret));
    const r = await exec(s.id, ['sh', '-c', `ls -A /etc; test -e ${secret} && echo visible; true`]);
    assert.equal(r.exit_code, 0, r.stderr);
    const names = r.stdout.trim().split('\n');
    assert.ok(!names.includes('visible'), r.stdout);
    assert.ok(!names.includes(secret.slice('/etc/'.length)), r.stdout);
    assert.ok(names.includes('fonts') && names.includes('passwd'), r.stdout);
    assert.ok(!names.includes('shadow'), r.stdout);
    // Chromium started in this sandbox: the session answered 201 and its DevTools answers.
    const v = await ctx.server.api('GET', `/v1/sessions/${s.id}/json/version`);
    assert.equal(v.status, 200, v.text);
    assert.ok(v.json.Browser, v.text);
  });

  test('its own cgroup namespace: no host cgroup path shows inside', async () => {
    const r = await exec(s.id, ['cat', '/proc/self/cgroup']);
    assert.equal(r.exit_code, 0, r.stderr);
    const paths = r.stdout.trim().split('\n').map((l) => l.split(':').slice(2).join(':'));
    assert.ok(paths.length > 0);
    assert.deepEqual([...new Set(paths)], ['/'], r.stdout);
  });
});
