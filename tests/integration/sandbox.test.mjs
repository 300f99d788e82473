// The namespace sandbox's walls, seen from inside through the exec API: what the seccomp filters
// deny to exec'd commands, what of the host's /etc and cgroups shows, and that Chromium still runs.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { procStatus, sessionProcess, useCabind } from './helpers.mjs';

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

// Run as an exec'd command with the sandbox's pids of Xvfb and the browser: what of them it can
// see, open or take.
const PROBE_PEERS = String.raw`
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
xvfb, browser = int(sys.argv[1]), int(sys.argv[2])
def errno_of(rc):
    return 0 if rc >= 0 else ctypes.get_errno()
def open_errno(path, flags):
    try:
        os.close(os.open(path, flags))
        return 0
    except OSError as e:
        return e.errno
out = {'uid': os.getuid(), 'gid': os.getgid()}
listed = set(os.listdir('/proc'))
out['listed'] = [p for p in (xvfb, browser) if str(p) in listed]
out['xvfb_mem'] = open_errno('/proc/%d/mem' % xvfb, os.O_RDWR)
out['browser_mem'] = open_errno('/proc/%d/mem' % browser, os.O_RDWR)
# pidfd_open needs no permission; taking a descriptor through it does.
pidfd = libc.syscall(434, browser, 0)
out['pidfd_open'] = errno_of(pidfd)
out['pidfd_getfd'] = errno_of(libc.syscall(438, pidfd, 0, 0))
# A readable address of the browser's when its maps show (they must not), else any.
addr = 0x10000
try:
    addr = int(open('/proc/%d/maps' % browser).readline().split('-')[0], 16)
except OSError:
    pass
class iovec(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
buf = ctypes.create_string_buffer(16)
local, remote = iovec(ctypes.addressof(buf), 16), iovec(addr, 16)
out['vm_readv'] = errno_of(libc.syscall(310, browser, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
print(json.dumps(out))
`;

// The sandbox's pid of a process the host knows as `hostPid` (the last NSpid field).
function innerPid(hostPid) {
  const nspid = procStatus(hostPid, 'NSpid');
  assert.ok(nspid, `NSpid of ${hostPid}`);
  return Number(nspid.split(/\s+/).at(-1));
}

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

  test('exec\'d commands run as their own uid and cannot see, write or take from Xvfb and Chromium',
       async () => {
    const xvfb = sessionProcess(s.id, 'Xvfb');
    const browser = sessionProcess(s.id, 'chromium');
    const r = await exec(s.id, ['/usr/bin/python3', '-c', PROBE_PEERS,
                                String(innerPid(xvfb)), String(innerPid(browser))]);
    assert.equal(r.exit_code, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), {
      uid: 1001, // not the agent's, Xvfb's or Chromium's 1000
      gid: 1000, // their group, which shared files belong to
      listed: [], // /proc is mounted hidepid=invisible
      xvfb_mem: 2, // ENOENT: not even there to open
      browser_mem: 2,
      pidfd_open: 0,
      pidfd_getfd: 1, // EPERM
      vm_readv: 1, // EPERM
    });
  });

  test('every helper but Chromium runs under the exec filter, and none holds a capability',
       async () => {
    const xvfb = sessionProcess(s.id, 'Xvfb');
    const browser = sessionProcess(s.id, 'chromium');
    const agent = sessionProcess(s.id, 'cabin-agent');
    // The sandbox's filter, then the exec filter on top.
    assert.equal(procStatus(xvfb, 'Seccomp_filters'), '2');
    assert.equal(procStatus(browser, 'Seccomp_filters'), '1');
    for (const pid of [xvfb, browser]) {
      for (const set of ['CapInh', 'CapPrm', 'CapEff', 'CapAmb']) {
        assert.equal(procStatus(pid, set), '0000000000000000', `${set} of ${pid}`);
      }
    }
    // The agent, in the sandbox's user namespace: CAP_SETUID, lent only to the helper that becomes
    // uid 1001, CAP_KILL and CAP_FOWNER; no more can come back (the bounding set).
    assert.equal(procStatus(agent, 'CapPrm'), '00000000000000a8');
    assert.equal(procStatus(agent, 'CapEff'), '0000000000000028');
    assert.equal(procStatus(agent, 'CapBnd'), '00000000000000a8');
    assert.equal(procStatus(agent, 'CapAmb'), '0000000000000000');
    assert.equal(procStatus(agent, 'CapInh'), '0000000000000000');
  });

  test('files pass both ways between the files API, the browser\'s user and exec\'d commands',
       async () => {
    const files = (p) => `/v1/sessions/${s.id}/files?${new URLSearchParams({ path: p })}`;
    const auth = { authorization: `Bearer ${ctx.server.key}` };
    const up = await fetch(ctx.server.base + files('/home/cabin/from-api.txt'),
                           { method: 'PUT', headers: auth, body: 'from the api\n' });
    assert.equal(up.status, 200, await up.text());
    const r = await exec(s.id, ['sh', '-c', [
      'cd /home/cabin',
      'cat from-api.txt',
      'echo appended >> from-api.txt',
      'mkdir -p made/deeper && echo by-command > made/deeper/out.txt',
      'echo in-tmp > /tmp/by-command.txt',
    ].join(' && ')]);
    assert.equal(r.exit_code, 0, r.stderr);
    assert.equal(r.stdout, 'from the api\n');
    const get = async (p) => {
      const res = await fetch(ctx.server.base + files(p), { headers: auth });
      assert.equal(res.status, 200, p);
      return res.text();
    };
    assert.equal(await get('/home/cabin/from-api.txt'), 'from the api\nappended\n');
    assert.equal(await get('/home/cabin/made/deeper/out.txt'), 'by-command\n');
    assert.equal(await get('/tmp/by-command.txt'), 'in-tmp\n');
    // The agent may replace and remove in the home a file a command made.
    const over = await fetch(ctx.server.base + files('/home/cabin/made/deeper/out.txt'),
                             { method: 'PUT', headers: auth, body: 'replaced\n' });
    assert.equal(over.status, 200, await over.text());
    const del = await fetch(ctx.server.base + files('/home/cabin/made/deeper/out.txt'),
                            { method: 'DELETE', headers: auth });
    assert.ok(del.status === 200 || del.status === 204, await del.text());
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
