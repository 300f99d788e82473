// Pause and resume on the namespace driver (the cgroup freezer): a paused sandbox runs nothing,
// its CDP connection stays open, what needs it is refused, and it goes on exactly where it was;
// a hundred pauses in a row; idle sessions that pause instead of ending; and a paused session
// still ends at its lifetime and leaves nothing.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { chromium } from 'playwright-core';

import { sessionPids, startTicking, useCabind, waitFor, waitForNoLeftovers } from './helpers.mjs';
import { exec } from './preview_helpers.mjs';

const ctx = useCabind();

// CPU time (user + system, in clock ticks) a process has used; null when it is gone.
function cpuTicks(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return null;
  }
}

// The host pid of the sandbox's process whose command line holds `marker`.
function pidWith(sessionId, marker) {
  for (const pid of sessionPids(sessionId)) {
    let cmdline = '';
    try {
      cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    if (cmdline.includes(marker)) return pid;
  }
  return null;
}

async function act(id, verb, want) {
  const r = await ctx.server.api('POST', `/v1/sessions/${id}/${verb}`);
  assert.equal(r.status, 200, `${verb}: ${r.text}`);
  assert.equal(r.json.status, want);
  return r.json;
}

test('a paused sandbox runs nothing and refuses what needs it; resumed, it goes on where it was', async () => {
  const info = await ctx.server.api('GET', '/v1/info');
  assert.equal(info.json.drivers.find((d) => d.name === 'namespace').supports_pause, true);
  const s = await ctx.server.createSession({});
  await exec(ctx.server, s.id, ['sh', '-c',
    '(setsid sh -c "while :; do :; done # spin-marker" > /dev/null 2>&1 < /dev/null &)']);
  const spinner = await waitFor(() => pidWith(s.id, 'spin-marker'), { what: 'the spinning process' });
  const browser = await chromium.connectOverCDP(s.cdp_url);
  try {
    const page = browser.contexts()[0].pages()[0];
    await startTicking(page);
    const ticksAtPause = await page.evaluate(() => window.ticks);
    const paused = await act(s.id, 'pause', 'paused');
    assert.match(paused.cdp_url, /\/cdp\?token=/, 'its URLs stay, for after the resume');
    const ticksBefore = cpuTicks(spinner);
    // Only time shows that nothing runs.
    await sleep(1500);
    assert.ok(cpuTicks(spinner) - ticksBefore <= 1, `the spinner ran: ${cpuTicks(spinner) - ticksBefore} ticks`);
    assert.equal((await ctx.server.api('GET', `/v1/sessions/${s.id}`)).json.status, 'paused');
    for (const [method, path, body] of [
      ['POST', 'exec', { argv: ['true'] }], ['GET', 'screenshot'],
      ['POST', 'computer', { actions: [{ op: 'cursor_position' }] }], ['GET', 'json/version']]) {
      const r = await ctx.server.api(method, `/v1/sessions/${s.id}/${path}`, body);
      assert.equal(r.status, 409, `${path}: ${r.text}`);
      assert.equal(r.json.error.code, 'session_paused');
    }
    const tok = await ctx.server.api('POST', `/v1/sessions/${s.id}/tokens`, { scope: 'view' });
    assert.equal(tok.status, 201, 'cabind\'s own work goes on');
    const status = await ctx.server.api('GET', `/v1/sessions/${s.id}/live/status?token=${tok.json.token}`);
    assert.equal(status.json.status, 'paused', 'the live view can say so');
    assert.equal((await ctx.server.api('POST', `/v1/sessions/${s.id}/pause`)).json.status, 'paused');

    await act(s.id, 'resume', 'running');
    // The same CDP connection answers, and the page's timers stood still while it was paused
    // (running, they would have ticked 30 times or more).
    const ticks = await page.evaluate(() => window.ticks);
    assert.ok(ticks - ticksAtPause < 15, `${ticks - ticksAtPause} ticks of 50 ms while paused`);
    await page.waitForFunction((t) => window.ticks > t + 2, ticks);
    const after = cpuTicks(spinner);
    await waitFor(() => cpuTicks(spinner) > after + 2, { what: 'the spinner to run again' });
    assert.equal((await exec(ctx.server, s.id, ['echo', 'back'])).stdout, 'back\n');
  } finally {
    await browser.close();
  }
});

test('a hundred pauses and resumes in a row each work, and a paused session is deleted cleanly', async () => {
  const s = await ctx.server.createSession({});
  for (let i = 0; i < 100; i++) {
    await act(s.id, 'pause', 'paused');
    await act(s.id, 'resume', 'running');
  }
  assert.equal((await exec(ctx.server, s.id, ['echo', 'ok'])).stdout, 'ok\n');
  await act(s.id, 'pause', 'paused');
  const d = await ctx.server.api('DELETE', `/v1/sessions/${s.id}`);
  assert.equal(d.status, 200, d.text);
  await waitForNoLeftovers(s.id, ctx.server.runDir);
  const gone = await ctx.server.api('POST', `/v1/sessions/${s.id}/resume`);
  assert.equal(gone.status, 404);
  assert.equal(gone.json.error.code, 'session_ended');
});

test('on_idle pause: an idle session is paused, not ended; paused, it still ends at its lifetime', async () => {
  const s = await ctx.server.createSession({ idle_timeout_s: 1, on_idle: 'pause' });
  assert.equal(s.on_idle, 'pause');
  const paused = await waitFor(async () => {
    const r = await ctx.server.api('GET', `/v1/sessions/${s.id}`);
    return r.json.status === 'paused' && r.json;
  }, { what: 'the idle session to pause' });
  assert.equal(paused.idle_since, null, 'a paused session is not idle');
  await act(s.id, 'resume', 'running');
  await act(s.id, 'pause', 'paused');
  const lifetime = Math.ceil((Date.now() - Date.parse(s.created_at)) / 1000) + 2;
  const p = await ctx.server.api('PATCH', `/v1/sessions/${s.id}`, { timeout_s: lifetime });
  assert.equal(p.status, 200, p.text);
  const ended = await waitFor(async () => {
    const r = await ctx.server.api('GET', `/v1/sessions/${s.id}`);
    return r.json.status === 'ended' && r.json;
  }, { timeoutMs: 15000, what: 'the paused session to end at its lifetime' });
  assert.equal(ended.end_reason, 'timeout');
  await waitForNoLeftovers(s.id, ctx.server.runDir);
});
