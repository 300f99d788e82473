// microVMs as copies: the first microVM of a shape boots a template VM and snapshots it; the
// sessions after it are copy-on-write copies, each made its own machine (agent secret, clock,
// kernel RNG, machine-id). A live fork saves a running session's whole machine while it pauses
// a moment, and each child is a copy of it: it continues with the source's pages, DOM,
// JavaScript heap, half-typed form, cookies and storage, with random values of its own, and
// children and source then diverge. A copy hibernates to a file and wakes as the same machine.
// Slow: the template boots under TCG.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { Cdp, qemuPidOf, useCabind, waitFor, withDeadline } from './helpers.mjs';
import { startShop } from './shop_site.mjs';

const shop = await startShop();
after(() => shop.close());
const ctx = useCabind({ args: shop.cabindArgs });
const BOOT_MS = 240000;
const SPEC = {
  driver: 'microvm',
  resolution: { width: 1024, height: 768 },
  resources: { vcpus: 2, memory_mb: 2048 },
};
// A copy's browser under TCG on a busy two-core host can take more than the default 10 s to
// answer its first DevTools connection; what these tests check is not how fast.
const CDP = { timeoutMs: 60000 };
const RANDOM = "Array.from(crypto.getRandomValues(new Uint8Array(16))).join(',')";

async function exec(id, argv) {
  const r = await ctx.server.api('POST', `/v1/sessions/${id}/exec`, { argv, timeout_ms: 30000 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.exit_code, 0, r.json.stderr);
  return r.json.stdout.trim();
}

// Runs `expression` in the session's first page, over the CDP bridge.
async function inPage(s, expression) {
  const cdp = await Cdp.connect(s.cdp_url, CDP);
  try {
    const { targetInfos } = await cdp.send('Target.getTargets');
    const page = targetInfos.find((t) => t.type === 'page');
    const { sessionId } = await cdp.send('Target.attachToTarget', { targetId: page.targetId, flatten: true });
    const r = await cdp.send('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true }, sessionId);
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
    const cdp = await Cdp.connect(sessions[0].cdp_url, CDP);
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
      seen.page.add(await inPage(s, RANDOM));
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
    // Commands run as a uid of their own, apart from the browser's (1000).
    assert.equal(await exec(s.id, ['id', '-u']), '1001');
    const cdp = await Cdp.connect(s.cdp_url, CDP);
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

  test('a frozen copy hibernates to a file, wakes as the same machine, and its end removes the file',
       async () => {
    const s = sessions[2];
    const file = `${ctx.server.stateDir}/hibernated/${s.id}.vmstate`;
    const machineId = await exec(s.id, ['cat', '/etc/machine-id']);
    await inPage(s, "window.mark = 'slept'; true");
    // Something of the guest's RAM that a reader of the file must not find.
    const secret = `at-rest-${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`;
    await inPage(s, `window.kept = ['${secret}'].join(''); true`);
    const frozen = await ctx.server.api('POST', `/v1/sessions/${s.id}/pause`);
    assert.equal(frozen.json.pause_mode, 'freeze');
    const h = await ctx.server.api('POST', `/v1/sessions/${s.id}/pause`, { mode: 'hibernate' });
    assert.equal(h.status, 200, h.text);
    assert.equal(h.json.pause_mode, 'hibernate');
    assert.equal(qemuPidOf(s.id), undefined, 'its QEMU is gone');
    assert.ok(fs.statSync(file).size > 50 << 20, 'the machine lies in its file');
    // Sealed: no page of the guest's in the clear.
    const saved = fs.readFileSync(file);
    assert.equal(saved.subarray(0, 10).toString('latin1'), 'CABINSEAL\x01');
    assert.equal(saved.indexOf(secret), -1, 'the page\'s string is in the file in the clear');
    const woken = await ctx.server.api('POST', `/v1/sessions/${s.id}/resume`);
    assert.equal(woken.status, 200, woken.text);
    assert.ok(!fs.existsSync(file), 'a woken machine\'s file goes');
    assert.equal(await inPage(s, 'window.mark'), 'slept');
    assert.equal(await inPage(s, 'window.kept'), secret);
    assert.equal(await exec(s.id, ['cat', '/etc/machine-id']), machineId, 'the same machine');

    assert.equal((await ctx.server.api('POST', `/v1/sessions/${s.id}/pause`,
                                       { mode: 'hibernate' })).status, 200);
    assert.ok(fs.existsSync(file));
    assert.equal((await ctx.server.api('DELETE', `/v1/sessions/${s.id}`)).status, 200);
    assert.ok(!fs.existsSync(file), 'an ended session\'s file goes');
    const bad = await ctx.server.api('POST', `/v1/sessions/${sessions[1].id}/pause`, { mode: 'nap' });
    assert.equal(bad.status, 400, bad.text);
  });
});

const STATE = "[window.mark, document.cookie, localStorage.getItem('cart'), " +
  "document.getElementById('q').value, document.title]";

describe('a live fork of a microVM session', { timeout: 600000 }, () => {
  let source;
  const sessions = [];
  before(async () => {
    source = await withDeadline(ctx.server.createSession({
      ...SPEC, network: shop.network, start_url: `${shop.origin}/login`,
    }), 60000, 'the source, a copy of the template above');
    sessions.push(source);
    // Its page goes on to a page of the logged-in site, then holds state no disk has.
    await inPage(source, `location.href = '${shop.origin}/home'`);
    await waitFor(async () => String(await inPage(source, 'document.title').catch(() => ''))
      .startsWith('hello'), { timeoutMs: 60000, intervalMs: 200, what: 'the source\'s page' });
    await inPage(source, "window.mark = 42; localStorage.setItem('cart', '3 apples'); " +
      "document.body.insertAdjacentHTML('beforeend', '<input id=q>'); " +
      "document.getElementById('q').value = 'half a fo'; true");
  }, { timeout: 180000 });
  after(async () => {
    for (const s of sessions) await ctx.server.api('DELETE', `/v1/sessions/${s.id}`);
  });

  test('each child continues from the source\'s running machine, and they diverge', async () => {
    const forked = await ctx.server.api('POST', `/v1/sessions/${source.id}/fork`, { count: 3 });
    assert.equal(forked.status, 201, forked.text);
    const children = forked.json.sessions;
    sessions.push(...children);
    assert.equal(children.length, 3);
    assert.deepEqual(forked.json.not_copied, []);
    assert.ok(forked.json.copied.includes('page_memory'));
    const expected = [42, 'sid=opensesame; visit=once', '3 apples', 'half a fo',
      'hello opensesame once /home'];
    const randoms = new Set([await inPage(source, RANDOM)]);
    for (const c of children) {
      assert.equal(c.status, 'running');
      assert.notEqual(c.id, source.id);
      assert.deepEqual(await inPage(c, STATE), expected, `${c.id}: the source's state`);
      randoms.add(await inPage(c, RANDOM));
    }
    assert.equal(randoms.size, 4, 'crypto.getRandomValues differs in each');
    assert.deepEqual(await inPage(source, STATE), expected, 'the source runs on, as it was');

    await inPage(children[0], "window.mark = 1; localStorage.setItem('cart', 'empty'); true");
    assert.deepEqual(await inPage(children[1], STATE), expected, 'a sibling keeps its own');
    assert.deepEqual(await inPage(source, STATE), expected, 'the source keeps its own');
    assert.equal(await inPage(children[0], 'window.mark'), 1);
    for (const c of children) {
      assert.equal((await ctx.server.api('DELETE', `/v1/sessions/${c.id}`)).status, 200);
    }
  });

  test('50 forks in a row give no two sessions the same random values', async () => {
    const seen = new Set([await inPage(source, RANDOM)]);
    let children = 0;
    while (children < 50) {
      const count = Math.min(3, 50 - children);  // with the source, the driver's 4 at most
      const forked = await ctx.server.api('POST', `/v1/sessions/${source.id}/fork`, { count });
      assert.equal(forked.status, 201, forked.text);
      for (const c of forked.json.sessions) {
        seen.add(await inPage(c, RANDOM));
        children++;
        assert.equal((await ctx.server.api('DELETE', `/v1/sessions/${c.id}`)).status, 200);
      }
    }
    assert.equal(children, 50);
    assert.equal(seen.size, children + 1);
  });
});
