// Profiles: a session that starts from a saved profile with `persist` leaves its cookies and
// storage in it when it ends, and the next session that uses the profile finds them: still
// logged in to a site the test serves. One live session at a time has a profile (409), a session
// without `persist` changes nothing, another tenant sees no profile of the admin's, and the
// saved profile is sealed on disk.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { api, sessionPids, startCabind, waitFor } from './helpers.mjs';
import { exec } from './preview_helpers.mjs';
import { onPage, shopAndCabind } from './shop_site.mjs';

const { shop, server } = await shopAndCabind();
const ORIGIN = shop.origin;
const { network } = shop;

async function profile(id, key) {
  const r = key ? await api(server.base, key, 'GET', `/v1/profiles/${id}`)
    : await server.api('GET', `/v1/profiles/${id}`);
  return r;
}

test('a login and local storage outlive the session that made them, in its profile', async () => {
  const made = await server.api('POST', '/v1/profiles', { name: 'shop login' });
  assert.equal(made.status, 201, made.text);
  const id = made.json.id;
  assert.match(id, /^prf_[a-z0-9]{20}$/);
  assert.equal(made.json.saved_at, null);
  assert.equal(made.json.in_use_by, null);

  // 1: logs in, keeps a cart in local storage, and saves both when it ends.
  const first = await server.createSession({
    network, start_url: `${ORIGIN}/login`, profile: { id, persist: true },
  });
  assert.deepEqual(first.profile, { id, persist: true });
  const stored = await onPage(first, "(localStorage.setItem('cart', '3 apples'), 'kept')");
  assert.equal(stored.title, 'logged in');
  assert.equal(stored.value, 'kept');

  // One live session at a time; the profile cannot go while it is used.
  const second = await server.api('POST', '/v1/sessions', { network, profile: { id } });
  assert.equal(second.status, 409, second.text);
  assert.equal(second.json.error.code, 'profile_in_use');
  assert.equal((await profile(id)).json.in_use_by, first.id);
  const busyDelete = await server.api('DELETE', `/v1/profiles/${id}`);
  assert.equal(busyDelete.status, 409, busyDelete.text);

  assert.equal((await server.api('DELETE', `/v1/sessions/${first.id}`)).status, 200);
  const saved = (await profile(id)).json;
  assert.equal(saved.in_use_by, null);
  assert.ok(saved.saved_at, JSON.stringify(saved));
  assert.ok(saved.size_bytes > 0, JSON.stringify(saved));
  // Sealed at rest: the cookie's value is nowhere in the clear; the session's dir is gone.
  const sealed = fs.readFileSync(path.join(server.stateDir, 'profiles', `${id}.sealed`));
  assert.ok(!sealed.includes('opensesame'), 'the saved profile holds the cookie in the clear');
  assert.ok(!fs.existsSync(path.join(server.stateDir, 'profiles', 'live', first.id)));

  // 2: without persist, finds the login, logs out; nothing of that is kept.
  const viewer = await server.createSession({
    network, start_url: `${ORIGIN}/`, profile: { id, persist: false },
  });
  const seen = await onPage(viewer, "localStorage.getItem('cart')");
  assert.match(seen.title, /^hello opensesame /, 'still logged in');
  assert.equal(seen.value, '3 apples');
  await onPage(viewer, `location.href = '${ORIGIN}/logout'`);
  await waitFor(async () => (await onPage(viewer)).title === 'logged out',
                { timeoutMs: 10000, what: 'the logout page' });
  assert.equal((await server.api('DELETE', `/v1/sessions/${viewer.id}`)).status, 200);
  assert.equal((await profile(id)).json.saved_at, saved.saved_at, 'not saved again');

  // 3: still logged in, as the first left it.
  const third = await server.createSession({ network, start_url: `${ORIGIN}/`, profile: { id } });
  assert.match((await onPage(third)).title, /^hello opensesame /);
  assert.equal((await server.api('DELETE', `/v1/sessions/${third.id}`)).status, 200);

  // A session without a profile starts empty.
  const fresh = await server.createSession({ network, start_url: `${ORIGIN}/` });
  assert.match((await onPage(fresh)).title, /^anonymous /);
  assert.equal((await server.api('DELETE', `/v1/sessions/${fresh.id}`)).status, 200);

  const listed = await server.api('GET', '/v1/profiles');
  assert.deepEqual(listed.json.profiles.map((p) => p.id), [id]);
  const gone = await server.api('DELETE', `/v1/profiles/${id}`);
  assert.equal(gone.status, 200, gone.text);
  assert.equal(gone.json.deleted, true);
  assert.equal((await profile(id)).status, 404);
  assert.ok(!fs.existsSync(path.join(server.stateDir, 'profiles', `${id}.sealed`)));
});

test('profiles are their tenant\'s own, bad ones are refused before anything starts', async () => {
  const made = await server.api('POST', '/v1/profiles', { name: 'admin only' });
  assert.equal(made.status, 201, made.text);
  const id = made.json.id;
  const minted = await server.api('POST', '/v1/keys', { name: 'tenant' });
  assert.equal(minted.status, 201, minted.text);
  const key = minted.json.key;

  // Another tenant's profile is no profile at all to this one.
  assert.equal((await profile(id, key)).status, 404);
  assert.deepEqual((await api(server.base, key, 'GET', '/v1/profiles')).json.profiles, []);
  const theirs = await api(server.base, key, 'POST', '/v1/sessions', { profile: { id } });
  assert.equal(theirs.status, 404, theirs.text);
  assert.equal(theirs.json.error.code, 'profile_not_found');
  assert.equal((await api(server.base, key, 'DELETE', `/v1/profiles/${id}`)).status, 404);
  const own = await api(server.base, key, 'POST', '/v1/profiles', { name: 'mine' });
  assert.equal(own.status, 201, own.text);
  assert.equal(own.json.owner, minted.json.id);
  assert.equal((await profile(own.json.id)).status, 200, 'the admin key sees every profile');

  for (const [body, code] of [
    [{ profile: { id: 'prf_nope' } }, 'invalid_request'],
    [{ profile: { persist: true } }, 'invalid_request'],
    [{ profile: { id, persist: 'yes' } }, 'invalid_request'],
    [{ profile: { id, extra: 1 } }, 'unknown_field'],
    [{ profile: { id: 'prf_aaaaaaaaaaaaaaaaaaaa' } }, 'profile_not_found'],
  ]) {
    const r = await server.api('POST', '/v1/sessions', body);
    assert.equal(r.json.error.code, code, `${JSON.stringify(body)}: ${r.text}`);
  }
  for (const body of [{}, { name: '' }, { name: 'x'.repeat(129) }, { name: 'a', more: 1 }]) {
    const r = await server.api('POST', '/v1/profiles', body);
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
  }
  const info = await server.api('GET', '/v1/info');
  const drivers = Object.fromEntries(info.json.drivers.map((d) => [d.name, d]));
  assert.equal(drivers.namespace.supports_profiles, true);
  assert.equal(drivers.namespace.supports_fork, true);
  if (drivers.microvm?.available) assert.equal(drivers.microvm.supports_profiles, true);
  const sessions = await server.api('GET', '/v1/sessions');
  assert.deepEqual(sessions.json.sessions.filter((s) => s.profile?.id === id), [],
                   'nothing was started');
  assert.equal((await profile(id)).json.in_use_by, null);
});

test('a tenant key has at most its max_profiles saved profiles', async () => {
  const minted = await server.api('POST', '/v1/keys', { name: 'one profile', max_profiles: 1 });
  assert.equal(minted.status, 201, minted.text);
  assert.equal(minted.json.max_profiles, 1);
  const key = minted.json.key;
  const first = await api(server.base, key, 'POST', '/v1/profiles', { name: 'first' });
  assert.equal(first.status, 201, first.text);
  const second = await api(server.base, key, 'POST', '/v1/profiles', { name: 'second' });
  assert.equal(second.status, 429, second.text);
  assert.equal(second.json.error.code, 'quota_profiles');
  assert.match(second.json.error.message, /max_profiles/);
  // Deleting one makes room again.
  assert.equal((await api(server.base, key, 'DELETE', `/v1/profiles/${first.json.id}`)).status, 200);
  const again = await api(server.base, key, 'POST', '/v1/profiles', { name: 'again' });
  assert.equal(again.status, 201, again.text);
});

test('a session left to the next cabind keeps its profile; one that is lost frees it', async () => {
  const args = [...shop.cabindArgs, '--on-shutdown', 'keep'];
  const first = await startCabind({ args });
  let next;
  try {
    const kept = (await first.api('POST', '/v1/profiles', { name: 'kept' })).json.id;
    const lost = (await first.api('POST', '/v1/profiles', { name: 'lost' })).json.id;
    const a = await first.createSession({
      network, start_url: `${ORIGIN}/login`, profile: { id: kept, persist: true },
    });
    const b = await first.createSession({ profile: { id: lost, persist: true } });
    await first.stop({ keep: true });
    // b's sandbox dies while no cabind is there.
    for (const pid of sessionPids(b.id)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {}
    }
    await waitFor(() => sessionPids(b.id).length === 0, { what: "b's processes to go" });

    next = await startCabind({ args, stateDir: first.stateDir, runDir: first.runDir, key: first.key });
    const profiles = Object.fromEntries(
      (await next.api('GET', '/v1/profiles')).json.profiles.map((p) => [p.id, p]));
    assert.equal(profiles[kept].in_use_by, a.id, 'the adopted session still has its profile');
    assert.equal(profiles[lost].in_use_by, null, 'the lost session\'s profile is free');
    assert.ok(!fs.existsSync(path.join(first.stateDir, 'profiles', 'live', b.id)));
    const adopted = await next.api('GET', `/v1/sessions/${a.id}`);
    assert.deepEqual(adopted.json.profile, { id: kept, persist: true });
    // Ended by the next cabind, it is saved as the first would have saved it.
    assert.equal((await next.api('DELETE', `/v1/sessions/${a.id}`)).status, 200);
    const saved = (await next.api('GET', `/v1/profiles/${kept}`)).json;
    assert.equal(saved.in_use_by, null);
    assert.ok(saved.saved_at, JSON.stringify(saved));
    const again = await next.createSession({ network, start_url: `${ORIGIN}/`, profile: { id: kept } });
    assert.match((await onPage(again)).title, /^hello opensesame /);
  } finally {
    // Both keep their sessions at shutdown: the one still running ends them first.
    const last = next ?? first;
    const live = await last.api('GET', '/v1/sessions').catch(() => null);
    for (const s of live?.json?.sessions ?? []) await last.api('DELETE', `/v1/sessions/${s.id}`);
    await last.stop();
  }
});

test('a sandbox that fills its profile fills a tmpfs of its own, not the host\'s disk', async () => {
  const id = (await server.api('POST', '/v1/profiles', { name: 'filled' })).json.id;
  const s = await server.createSession({
    resources: { memory_mb: 1024 }, profile: { id, persist: true },
  });
  const live = path.join(server.stateDir, 'profiles', 'live', s.id);
  const mount = fs.readFileSync('/proc/self/mounts', 'utf8').split('\n')
    .find((l) => l.split(' ')[1] === live);
  assert.ok(mount, `the profile dir ${live} is a mount of its own`);
  assert.match(mount, /^tmpfs \S+ tmpfs .*nosuid.*nodev.*noexec/);
  const fill = await exec(server, s.id, ['sh', '-c',
    'dd if=/dev/zero of="$HOME/chromium/fill" bs=1M 2>&1; df -k "$HOME/chromium" | tail -1']);
  assert.match(fill.stdout, /No space left on device/);
  // Half the sandbox's memory, as its home has.
  const size = Number(fill.stdout.trim().split('\n').pop().split(/\s+/)[1]);
  assert.equal(size, 512 * 1024, fill.stdout);
  // The saved profile would be over its limit: the session ends, and the profile keeps what it
  // had (nothing); the mount and the dir are gone.
  assert.equal((await server.api('DELETE', `/v1/sessions/${s.id}`)).status, 200);
  const after = (await server.api('GET', `/v1/profiles/${id}`)).json;
  assert.equal(after.saved_at, null, JSON.stringify(after));
  assert.ok(!fs.readFileSync('/proc/self/mounts', 'utf8').includes(live));
  assert.ok(!fs.existsSync(live));
});
