// The microvm driver end to end: a real QEMU guest booted from the image vm-images/build-image
// made, driven by Playwright and Puppeteer through cdp_url, exec inside the guest, the guest's
// isolation, pause and resume, and its end when idle. Slow: a guest boots in tens of seconds under TCG.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';
import puppeteer from 'puppeteer-core';

import {
  leftovers, openDescriptors, startTicking, useCabind, waitFor, waitForNoLeftovers, withDeadline,
} from './helpers.mjs';
import { wsViewer } from './rfb_client.mjs';

const ctx = useCabind();
const BOOT_MS = 240000;

async function exec(id, argv, timeout_ms = 20000) {
  const r = await ctx.server.api('POST', `/v1/sessions/${id}/exec`, { argv, timeout_ms });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

// QEMU runs in its session's directory (<run-dir>-vm/<id>), which names the session.
function qemuProcessesOf(id) {
  let out = '';
  try {
    out = execFileSync('pgrep', ['-f', 'qemu-system'], { encoding: 'utf8' });
  } catch {
    return [];  // pgrep exits 1 when nothing matches
  }
  return out.split('\n').filter(Boolean).filter((pid) => {
    try {
      // cabin-vmm-wrap, QEMU's parent, names QEMU in its arguments and shares its directory.
      return fs.readlinkSync(`/proc/${pid}/cwd`).includes(id) &&
        path.basename(fs.readlinkSync(`/proc/${pid}/exe`)).startsWith('qemu-system');
    } catch {
      return false;  // exited meanwhile
    }
  });
}

describe('a microVM session', { timeout: BOOT_MS + 120000 }, () => {
  let s;
  before(async () => {
    const info = await ctx.server.api('GET', '/v1/info');
    const vm = info.json.drivers.find((d) => d.name === 'microvm');
    assert.ok(vm, 'the microvm driver is listed');
    assert.ok(vm.available, `microvm driver unavailable: ${vm.unavailable_reason}`);
    assert.match(vm.detail, /^(KVM|TCG)/);
    s = await withDeadline(
      ctx.server.createSession({
        driver: 'microvm',
        resolution: { width: 1024, height: 768 },
        resources: { vcpus: 2, memory_mb: 2048 },
        start_url: 'data:text/html,<title>vm-start</title>',
      }),
      BOOT_MS, 'a microVM session to start');
  }, { timeout: BOOT_MS + 10000 });
  after(async () => {
    if (s) await ctx.server.api('DELETE', `/v1/sessions/${s.id}`);
  });

  test('create answers like any session, on the microvm driver', () => {
    assert.equal(s.status, 'running');
    assert.equal(s.driver, 'microvm');
    assert.deepEqual(s.resolution, { width: 1024, height: 768 });
    assert.equal(qemuProcessesOf(s.id).length, 1, 'one QEMU runs for the session');
  });

  test('QEMU runs jailed: its own uid, its seccomp filter, a root without the host files, ' +
       'alone in its pid and net namespaces', () => {
    const [pid] = qemuProcessesOf(s.id);
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    assert.notEqual(fs.readlinkSync(`/proc/${pid}/ns/pid`), fs.readlinkSync('/proc/self/ns/pid'),
      'QEMU has a pid namespace of its own');
    assert.match(status, /^NSpid:\s+\d+\s+1$/m, 'QEMU is the first process there');
    assert.notEqual(fs.readlinkSync(`/proc/${pid}/ns/net`), fs.readlinkSync('/proc/self/ns/net'),
      'QEMU has a net namespace of its own');
    // Its forward to the agent listens on that namespace's loopback, not on the host's.
    const listening = (table) => table.split('\n').slice(1).map((l) => l.trim().split(/\s+/))
      .filter((f) => f[3] === '0A').map((f) => f[1]);
    const inJail = listening(fs.readFileSync(`/proc/${pid}/net/tcp`, 'utf8'));
    assert.equal(inJail.length, 1, `one listener in QEMU's namespace: ${inJail}`);
    assert.ok(!listening(fs.readFileSync('/proc/self/net/tcp', 'utf8')).includes(inJail[0]),
      `${inJail[0]} is not listening on the host`);
    const uid = Number(/^Uid:\s+(\d+)/m.exec(status)[1]);
    assert.notEqual(uid, 0, 'QEMU does not run as root');
    assert.match(status, /^Seccomp:\s+2$/m, 'QEMU runs under a seccomp filter');
    assert.match(status, /^CapEff:\s+0+$/m, 'QEMU holds no capabilities');
    const root = `/proc/${pid}/root`;
    assert.ok(fs.existsSync(`${root}/usr/bin`), 'the jail has /usr');
    for (const hostPath of ['/etc/passwd', '/root', '/home', '/var', ctx.server.stateDir,
                            `${ctx.server.runDir}`]) {
      assert.ok(!fs.existsSync(root + hostPath), `${hostPath} is not in QEMU's root`);
    }
  });

  test('QEMU and its wrap hold no socket or pipe of cabind but their output pipe', () => {
    const shared = (fds) => new Set([...fds.values()].filter((t) => /^(socket|pipe):/.test(t)));
    const cabind = shared(openDescriptors(ctx.server.pid));
    const [pid] = qemuProcessesOf(s.id);
    const wrap = Number(/^PPid:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
    for (const [who, p] of [['QEMU', pid], ['cabin-vmm-wrap', wrap]]) {
      const leaks = [...openDescriptors(p)].filter(([fd, t]) => fd > 2 && cabind.has(t));
      assert.deepEqual(leaks, [], `descriptors of cabind in ${who}`);
    }
  });

  test('Playwright and Puppeteer drive the guest browser at once', { timeout: 400000 }, async () => {
    // Under TCG the guest's Chromium answers slowly: Playwright's attach takes tens of seconds.
    const pw = await chromium.connectOverCDP(s.cdp_url, { timeout: 180000 });
    const pp = await puppeteer.connect({
      browserWSEndpoint: s.cdp_url, defaultViewport: null, protocolTimeout: 180000,
    });
    try {
      const page = pw.contexts()[0].pages()[0];
      page.setDefaultTimeout(120000);
      await waitFor(async () => (await page.title()) === 'vm-start', {
        what: 'start_url', timeoutMs: 60000,
      });
      await page.setContent('<title>from playwright</title><p id=p>guest</p><div style="position:' +
                            'fixed;inset:0;top:40px;background:rgb(0,200,100)"></div>');
      assert.equal(await page.evaluate(() => 6 * 7), 42);
      assert.deepEqual(await page.evaluate(() => [screen.width, screen.height]), [1024, 768]);
      const titles = await Promise.all((await pp.pages()).map((p) => p.title()));
      assert.ok(titles.includes('from playwright'), `puppeteer sees ${titles}`);
      const shot = await page.screenshot();
      assert.equal(shot.subarray(1, 4).toString(), 'PNG');
    } finally {
      await pp.disconnect();
      await pw.close();
    }
  });

  test('the live view reads the guest\'s screen through the agent tunnel', async () => {
    // The page Playwright set above fills the window below its first 40 px with one colour.
    const c = await wsViewer(s.vnc_url, { timeoutMs: 30000 });
    try {
      assert.deepEqual([c.width, c.height], [1024, 768]);
      await waitFor(async () => {
        c.request(false);
        await c.update();
        const [r, g, b] = c.rgb(512, 600);
        return r === 0 && g === 200 && b === 100;
      }, { what: 'the page colour in the framebuffer', timeoutMs: 60000 });
    } finally {
      c.close();
    }
  });

  test('exec runs as a user of its own, on a read-only root, away from the browser', async () => {
    const r = await exec(s.id, ['sh', '-c', [
      'id -u; id -g; touch /x 2>&1; echo tmp > /tmp/t && cat /tmp/t',
      // The comms of every process it can list (/proc is hidepid=invisible).
      'for p in /proc/[0-9]*; do cat "$p/comm"; done 2>/dev/null | sort -u | tr "\\n" " "; echo',
      'unshare -U true 2>/dev/null; echo "unshare=$?"',
    ].join('; ')]);
    assert.equal(r.exit_code, 0, r.stderr);
    const [uid, gid, touch, tmp, comms, unshare] = r.stdout.trim().split('\n');
    assert.equal(uid, '1001'); // not Chromium's 1000
    assert.equal(gid, '1000');
    assert.match(touch, /Read-only file system|Permission denied/);
    assert.equal(tmp, 'tmp');
    const seen = comms.trim().split(' ');
    for (const hidden of ['Xvfb', 'chromium', 'cabin-agent']) assert.ok(!seen.includes(hidden), comms);
    assert.ok(seen.includes('sh'), comms);
    assert.equal(unshare, 'unshare=1'); // the exec filter
  });

  test('the guest reaches neither the host, nor the outside, nor DNS', async () => {
    const port = ctx.server.port;
    const probe = (host, p) =>
      `timeout 5 bash -c 'exec 3<>/dev/tcp/${host}/${p}' 2>/dev/null && echo open || echo closed`;
    const r = await exec(s.id, ['sh', '-c', [
      probe('10.0.2.2', port),       // the host, through QEMU's gateway address
      probe('127.0.0.1', port),      // the guest's own loopback: nothing of the host there
      probe('1.1.1.1', 80),          // anywhere outside
      'getent hosts example.com >/dev/null && echo resolved || echo unresolved',
    ].join('; ')], 30000);
    assert.deepEqual(r.stdout.trim().split('\n'), ['closed', 'closed', 'closed', 'unresolved']);
  });

  test('pause stops the guest where it is; resumed, it goes on with the same CDP connection', async () => {
    const browser = await chromium.connectOverCDP(s.cdp_url);
    try {
      const page = browser.contexts()[0].pages()[0];
      const at = await startTicking(page);
      const p = await ctx.server.api('POST', `/v1/sessions/${s.id}/pause`);
      assert.equal(p.status, 200, p.text);
      assert.equal(p.json.status, 'paused');
      // Only time shows that nothing runs: running, the page would tick 30 times meanwhile.
      await new Promise((r) => setTimeout(r, 1500));
      const refused = await ctx.server.api('POST', `/v1/sessions/${s.id}/exec`, { argv: ['true'] });
      assert.equal(refused.status, 409, refused.text);
      assert.equal(refused.json.error.code, 'session_paused');
      const r = await ctx.server.api('POST', `/v1/sessions/${s.id}/resume`);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.status, 'running');
      const ticks = await page.evaluate(() => window.ticks);
      assert.ok(ticks - at < 15, `${ticks - at} ticks of 50 ms while paused`);
      assert.equal((await exec(s.id, ['echo', 'back'])).stdout, 'back\n');
    } finally {
      await browser.close();
    }
  });

  test('no one using it, it ends at its idle timeout: QEMU stops and nothing is left', async () => {
    const id = s.id;
    const runDir = `${ctx.server.runDir}-vm`;
    assert.ok(leftovers(id, runDir).length > 0, 'the session has a run dir while live');
    const p = await ctx.server.api('PATCH', `/v1/sessions/${id}`, { idle_timeout_s: 1 });
    assert.equal(p.status, 200, p.text);
    const ended = await waitFor(async () => {
      const g = await ctx.server.api('GET', `/v1/sessions/${id}`);
      return g.json.status === 'ended' && g.json;
    }, { timeoutMs: 30000, what: 'the idle microVM to end' });
    assert.equal(ended.end_reason, 'idle');
    // DELETE of an ended session answers its record again.
    const r = await ctx.server.api('DELETE', `/v1/sessions/${id}`);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.status, 'ended');
    assert.equal(r.json.end_reason, 'idle');
    s = null;
    await waitForNoLeftovers(id, runDir);
    await waitFor(() => qemuProcessesOf(id).length === 0, { what: 'QEMU to exit' });
  });
});
