// The namespace sandbox's walls, seen from inside through the exec API: what the seccomp filters
// deny to exec'd commands.
import assert from 'node:assert/strict';
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
  before(async () => {
    s = await ctx.server.createSession({});
  });
  after(async () => {
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
});
