// Profiles on the microvm driver: the profile travels on the VM's own disk. A session that logs in
// to a site and keeps a cart in local storage leaves both in its profile when it ends (its
// agent packs the profile onto the disk once the browser closed, and cabind reads it back from
// the disk's file); the next microVM with that profile is still logged in. One live session at a
// time has a profile. Slow: each session boots a guest cold.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';

import { qemuPidOf } from './helpers.mjs';
import { onPage, shopAndCabind } from './shop_site.mjs';

const BOOT_MS = 240000;
const { shop, server } = await shopAndCabind({
  args: ['--microvm-start-timeout-ms', String(BOOT_MS)],
});
const ORIGIN = shop.origin;
const { network } = shop;
const VM = { driver: 'microvm', network };

describe('a profile on the microvm driver', { timeout: 3 * BOOT_MS }, () => {
  test('a login and local storage outlive the microVM that made them', async () => {
    const made = await server.api('POST', '/v1/profiles', { name: 'shop login in a VM' });
    assert.equal(made.status, 201, made.text);
    const { id } = made.json;

    const first = await server.createSession({
      ...VM, start_url: `${ORIGIN}/login`, profile: { id, persist: true },
    });
    assert.equal(first.driver, 'microvm');
    const stored = await onPage(first, "(localStorage.setItem('cart', '3 apples'), 'kept')");
    assert.equal(stored.title, 'logged in');
    assert.equal(stored.value, 'kept');
    // The VM's profile disk: a file in its dir that only its QEMU (and cabind) may open.
    const disk = fs.statSync(path.join(`${server.runDir}-vm`, first.id, 'profile.img'));
    assert.equal(disk.mode & 0o077, 0, 'the profile disk is private');
    assert.equal(disk.size, 8 + 320 * 1024 * 1024);
    assert.ok(qemuPidOf(first.id), 'the VM runs');

    const second = await server.api('POST', '/v1/sessions', { ...VM, profile: { id } });
    assert.equal(second.status, 409, second.text);
    assert.equal(second.json.error.code, 'profile_in_use');

    assert.equal((await server.api('DELETE', `/v1/sessions/${first.id}`)).status, 200);
    const saved = (await server.api('GET', `/v1/profiles/${id}`)).json;
    assert.equal(saved.in_use_by, null);
    assert.ok(saved.saved_at, JSON.stringify(saved));
    const sealed = fs.readFileSync(path.join(server.stateDir, 'profiles', `${id}.sealed`));
    assert.ok(!sealed.includes('opensesame'), 'the saved profile holds the cookie in the clear');

    const next = await server.createSession({
      ...VM, start_url: `${ORIGIN}/`, profile: { id },
    });
    const seen = await onPage(next, "localStorage.getItem('cart')");
    assert.match(seen.title, /^hello opensesame /, 'still logged in');
    assert.equal(seen.value, '3 apples');
    assert.equal((await server.api('DELETE', `/v1/sessions/${next.id}`)).status, 200);
    assert.equal((await server.api('GET', `/v1/profiles/${id}`)).json.saved_at, saved.saved_at,
                 'without persist nothing is saved');
  });
});
