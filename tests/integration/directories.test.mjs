// Two servers on one run dir (or one state dir): the second refuses to start and says whose the
// directory is; the first one's sessions live on. Without the lock, the second one's drivers kill
// every sandbox in the run dir that its own store does not know.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BIN_DIR, removeServerDirs, useCabind, withDeadline } from './helpers.mjs';

const ctx = useCabind();

// Runs a second cabind to its exit; resolves with its exit code and what it printed.
function secondServer(stateDir, runDir) {
  const child = spawn(path.join(BIN_DIR, 'cabind'),
    ['--listen', '127.0.0.1:0', '--state-dir', stateDir, '--run-dir', runDir], {
      env: { ...process.env, CABIN_API_KEY: 'k'.repeat(32) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { out += d; });
  const exited = new Promise((resolve) => child.on('exit', (code) => resolve({ code, out })));
  // One that does start would listen forever: the test fails on the deadline, then kills it.
  return withDeadline(exited, 15000, 'the second cabind to refuse').finally(() => child.kill());
}

describe('two servers', () => {
  let session;
  const dirs = [];
  const tempDir = async (prefix) => {
    const d = await fsp.mkdtemp(prefix);
    dirs.push(d);
    return d;
  };
  before(async () => {
    session = await ctx.server.createSession();
  });
  after(async () => {
    // A run dir's microvm sibling too: the second cabind makes both before it finds the lock.
    for (const d of dirs) await removeServerDirs({ stateDir: d, runDir: d });
  });

  test('a second cabind on the same run dir refuses, naming the first one\'s pid', async () => {
    const state = await tempDir(path.join(os.tmpdir(), 'cabin-state-'));
    const { code, out } = await secondServer(state, ctx.server.runDir);
    assert.notEqual(code, 0, out);
    assert.match(out, /--run-dir \S+ is in use by another cabind \(pid (\d+)\)/);
    assert.equal(Number(/\(pid (\d+)\)/.exec(out)[1]), ctx.server.pid);
    assert.match(out, /its own --run-dir and --state-dir/);
  });

  test('and on the same state dir', async () => {
    const run = await tempDir('/tmp/cbr-');
    const { code, out } = await secondServer(ctx.server.stateDir, run);
    assert.notEqual(code, 0, out);
    assert.match(out, new RegExp(`--state-dir ${ctx.server.stateDir} is in use by another ` +
                                 `cabind \\(pid ${ctx.server.pid}\\)`));
  });

  test('the first one\'s session lives on', async () => {
    const got = await ctx.server.api('GET', `/v1/sessions/${session.id}`);
    assert.equal(got.json.status, 'running', got.text);
    const shot = await ctx.server.api('GET', `/v1/sessions/${session.id}/screenshot`);
    assert.equal(shot.status, 200, shot.text);
  });
});
