// microVMs as copies of a template: the first microVM of a shape boots a template VM and
// snapshots it; the sessions after it are copy-on-write copies, each made its own machine
// (agent secret, clock, kernel RNG, machine-id). Slow: the template boots under TCG.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { Cdp, qemuPidOf, useCabind, waitFor, withDeadline } from './helpers.mjs';

const ctx = useCabind();
const BOOT_MS = 240000;
const SPEC = {
  driver: 'microvm',
  resolution: { width: 1024, height: 768 },
  resources: { vcpus: 2, memory_mb: 2048 },
};

async function exec(id, argv) {
  const r = await ctx.server.api('POST', `/v1/sessions/${id}/exec`, { argv, timeout_ms: 30000 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.exit_code, 0, r.json.stderr);
  return r.json.stdout.trim();
}

// crypto.getRandomValues in the session's first page, over the CDP bridge.
async function pageRandom(s) {
  const cdp = await Cdp.connect(s.cdp_url);
  try {
    const { targetInfos } = await cdp.send('Target.getTargets');
    const page = targetInfos.find((t) => t.type === 'page');
    const { sessionId } = await cdp.send('Target.attachToTarget', { targetId: page.targetId, flatten: true });
    const r = await cdp.send('Runtime.evaluate', {
      expression: 'Array.from(crypto.getRandomValues(new Uint8Array(16))).join(",")',
      returnByValue: true,
    }, sessionId);
    return r.result.value;
  } finally {
    await cdp.close();
  }
}

describe('microVMs restored from a template', { timeout: BOOT_MS + 240000 }, () => {
  const sessions = [];
  before(async () => {
    // The first builds the template (a boot), then is its first copy.
    sessions.push(await withDeadline(
      ctx.server.createSession({ ...SPEC, start_url: 'data:text/html,<title>first</title>' }),
      BOOT_MS, 'the template and its first copy'));
    for (let i = 0; i < 2; i++) {
      sessions.push(await withDeadline(ctx.server.createSession(SPEC), 60000, 'a copy'));
    }
  }, { timeout: BOOT_MS + 130000 });
  after(async () => {
    for (const s of sessions) await ctx.server.api('DELETE', `/v1/sessions/${s.id}`);
  });

  test('every session of the shape is a copy of one template', async () => {
    const info = await ctx.server.api('GET', '/v1/info');
    const t = info.json.templates.find((x) => x.shape === 'microvm:1024x768:2048M:2');
    assert.ok(t, JSON.stringify(info.json.templates));
    assert.equal(t.state, 'ready');
    assert.equal(t.copies, 3);
    for (const s of sessions) assert.equal(s.status, 'running');
  });

  test('the start page of a copy is its own', async () => {
    const cdp = await Cdp.connect(sessions[0].cdp_url);
    try {
      const { targetInfos } = await cdp.send('Target.getTargets');
      assert.ok(targetInfos.some((t) => t.type === 'page' && t.title === 'first'),
        JSON.stringify(targetInfos));
    } finally {
      await cdp.close();
    }
  });

  test('each copy is its own machine: kernel RNG, page RNG, machine-id, clock', async () => {
    const seen = { urandom: new Set(), page: new Set(), machineId: new Set() };
    for (const s of sessions) {
      seen.urandom.add(await exec(s.id, ['sh', '-c', 'head -c 32 /dev/urandom | od -An -tx1 | tr -d " \\n"']));
      seen.page.add(await pageRandom(s));
      const id = await exec(s.id, ['cat', '/etc/machine-id']);
      assert.match(id, /^[0-9a-f]{32}$/);
      seen.machineId.add(id);
      const before = Date.now() / 1000;
      const guest = Number(await exec(s.id, ['date', '+%s.%N']));
      const afterT = Date.now() / 1000;
      assert.ok(guest >= before - 1 && guest <= afterT + 1,
        `guest clock ${guest} against the host's ${before}..${afterT}`);
    }
    assert.equal(seen.urandom.size, sessions.length, 'the kernel RNG differs');
    assert.equal(seen.page.size, sessions.length, 'crypto.getRandomValues differs');
    assert.equal(seen.machineId.size, sessions.length, 'machine-id differs');
  });

  test('a copy shares the template\'s memory: what it holds alone is a small part of its RAM', () => {
    const pid = qemuPidOf(sessions[2].id);
    assert.ok(pid, 'the copy\'s QEMU runs');
    const rollup = fs.readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
    // Anonymous: QEMU's own heap and the guest pages the copy wrote; the rest it shares.
    const own = Number(/^Anonymous:\s+(\d+) kB/m.exec(rollup)[1]);
    const rss = Number(/^Rss:\s+(\d+) kB/m.exec(rollup)[1]);
    assert.ok(own < 2048 * 1024 / 2, `QEMU holds ${own} kB of its own for a 2 GiB guest`);
    assert.ok(rss - own > 100 * 1024, `${rss - own} kB of ${rss} kB shared with the template`);
  });

  test('a copy runs its browser and commands as a cold one does', async () => {
    const s = sessions[1];
    assert.equal(await exec(s.id, ['id', '-u']), '1000');
    const cdp = await Cdp.connect(s.cdp_url);
    try {
      const { targetId } = await cdp.send('Target.createTarget', {
        url: 'data:text/html,<title>mine</title>',
      });
      const { sessionId } = await cdp.send('Target.attachToTarget', { targetId, flatten: true });
      await waitFor(async () => (await cdp.send('Runtime.evaluate', {
        expression: 'document.title', returnByValue: true,
      }, sessionId)).result.value === 'mine', { what: 'the new page', timeoutMs: 60000, intervalMs: 100 });
    } finally {
      await cdp.close();
    }
  });
});
