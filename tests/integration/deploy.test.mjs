// What deploy/ ships: the systemd unit passes systemd-analyze verify, and cabind starts on the
// sample configuration and serves with what it says.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

import { BIN_DIR, removeServerDirs, removeTree, startCabind } from './helpers.mjs';

const UNIT = fs.readFileSync('deploy/cabind.service', 'utf8');

test('the systemd unit passes systemd-analyze verify, and keeps sandboxes out of its kill', async () => {
  // verify checks that ExecStart names an executable: this build's, in a copy of the unit.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-unit-'));
  try {
    const unit = path.join(dir, 'cabind.service');
    fs.writeFileSync(unit, UNIT.replace('/opt/cabin/bin/cabind', path.join(BIN_DIR, 'cabind')));
    const r = spawnSync('systemd-analyze', ['verify', unit], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.doesNotMatch(r.stderr, /cabind\.service:/, r.stderr);
  } finally {
    await removeTree(dir);
  }
  assert.match(UNIT, /^KillMode=process$/m);
  assert.match(UNIT, /^RuntimeDirectoryPreserve=yes$/m);
  assert.match(UNIT, /^ExecStart=\/opt\/cabin\/bin\/cabind --config \/etc\/cabin\/cabind\.toml$/m);
});

test('cabind starts on the sample configuration and serves what it says', async () => {
  const server = await startCabind({ args: ['--config', 'deploy/cabind.toml'] });
  try {
    const ready = await fetch(`${server.base}/readyz`);
    assert.equal(ready.status, 200);
    const info = await server.api('GET', '/v1/info');
    assert.equal(info.status, 200, info.text);
    assert.equal(info.json.limits.default_idle_timeout_s, 300);
    assert.equal(info.json.sessions.max, 16);
    assert.equal(info.json.default_driver, 'namespace');
  } finally {
    await server.stop();
    await removeServerDirs(server);
  }
});
