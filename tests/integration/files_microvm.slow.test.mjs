// Files, the browser's events and a screen recording on the microvm driver, where each crosses
// the guest's agent over its one forwarded port: an upload comes back with the same hash, a
// download shows in the events and through the files API, and a recording started with the
// create stops at its limit and plays as H.264, as long as its record says. Slow: the session
// boots a guest cold.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';

import { openSse, useCabind, waitFor } from './helpers.mjs';

const BOOT_MS = 240000;
const ctx = useCabind({
  args: ['--microvm-start-timeout-ms', String(BOOT_MS), '--microvm-templates', 'off'],
  startTimeoutMs: 30000,
});
const sha256 = (buf) => createHash('sha256').update(buf).digest('hex');

describe('files, events and recordings in a microVM', { timeout: 3 * BOOT_MS }, () => {
  let s, sse, browser, page, dir;
  const auth = () => ({ authorization: `Bearer ${ctx.server.key}` });
  const files = (p) => `${ctx.server.base}/v1/sessions/${s.id}/files?${new URLSearchParams({ path: p })}`;

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-vmfiles-'));
    s = await ctx.server.createSession({ driver: 'microvm', record: { fps: 5, max_duration_s: 5 } });
    assert.equal(s.driver, 'microvm');
    sse = await openSse(`${ctx.server.base}/v1/sessions/${s.id}/events?since=0`, auth());
    browser = await chromium.connectOverCDP(s.cdp_url);
    page = browser.contexts()[0].pages()[0];
  });
  after(async () => {
    sse?.close();
    await browser?.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('an upload comes back whole', async () => {
    const body = randomBytes(4 << 20);
    const put = await fetch(files('/tmp/blob.bin'), { method: 'PUT', headers: auth(), body });
    assert.equal(put.status, 200, await put.text());
    const got = Buffer.from(await (await fetch(files('/tmp/blob.bin'), { headers: auth() })).arrayBuffer());
    assert.equal(got.length, body.length);
    assert.equal(sha256(got), sha256(body));
  });

  test('a download shows in the events and through the files API', async () => {
    const content = `vm ${randomBytes(4).toString('hex')}\n`;
    await page.setContent(`<a id=a download="from the vm.txt"
      href="data:text/plain;base64,${Buffer.from(content).toString('base64')}">get</a>`);
    await page.click('#a');
    const done = await waitFor(() => sse.events.find((e) => e.type === 'download_finished'),
                               { timeoutMs: 30000, what: 'download_finished' });
    assert.equal(done.sha256, sha256(Buffer.from(content)));
    const file = await fetch(files(done.path), { headers: auth() });
    assert.equal(await file.text(), content);
  });

  test('the recording started with the create stops at its limit and plays', async () => {
    assert.equal(s.recordings.length, 1, JSON.stringify(s.recordings));
    const id = s.recordings[0].id;
    const rec = await waitFor(async () => {
      const r = (await ctx.server.api('GET', `/v1/sessions/${s.id}/recordings`)).json.recordings
        .find((x) => x.id === id);
      return r && r.status !== 'recording' && r.status !== 'stopping' && r;
    }, { timeoutMs: 60000, intervalMs: 500, what: 'the recording to stop' });
    assert.equal(rec.status, 'stopped', JSON.stringify(rec));
    assert.equal(rec.reason, 'max_duration');
    const res = await fetch(`${ctx.server.base}/v1/sessions/${s.id}/recordings/${id}`, { headers: auth() });
    assert.equal(res.status, 200);
    const file = path.join(dir, 'vm.mp4');
    fs.writeFileSync(file, Buffer.from(await res.arrayBuffer()));
    const probe = JSON.parse(execFileSync('ffprobe', [
      '-v', 'error', '-select_streams', 'v:0', '-show_entries', 'stream=codec_name:format=duration',
      '-of', 'json', file,
    ]).toString());
    assert.equal(probe.streams[0].codec_name, 'h264');
    // Under TCG the guest's encoder falls far behind: the video may be shorter than the 5 s
    // recorded, and then its record says so.
    assert.ok(rec.frames >= 1 && rec.duration_s > 0, JSON.stringify(rec));
    assert.ok(Math.abs(Number(probe.format.duration) - rec.duration_s) <= 0.5,
              `video ${probe.format.duration} s, record ${rec.duration_s} s`);
  });
});
