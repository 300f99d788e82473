// Screen recordings against a real session: the video is probed with ffprobe and its frames are
// decoded with ffmpeg, so what is checked is what a player shows.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';

import { useCabind, waitFor } from './helpers.mjs';

const ctx = useCabind();

// ffprobe's view of a video file: duration, frames, codec, size.
function probe(file) {
  const out = JSON.parse(execFileSync('ffprobe', [
    '-v', 'error', '-count_frames', '-select_streams', 'v:0', '-show_entries',
    'stream=codec_name,width,height,nb_read_frames:format=duration', '-of', 'json', file,
  ]).toString());
  const s = out.streams[0];
  return { codec: s.codec_name, width: s.width, height: s.height,
           frames: Number(s.nb_read_frames), duration: Number(out.format.duration) };
}

// The RGB of pixel (x, y) of the frame at `t` seconds.
function pixelAt(file, t, x, y) {
  const raw = execFileSync('ffmpeg', ['-v', 'error', '-ss', String(t), '-i', file, '-frames:v', '1',
                                      '-vf', `format=rgb24,crop=1:1:${x}:${y}`, '-f', 'rawvideo',
                                      '-pix_fmt', 'rgb24', '-']);
  return [...raw.subarray(0, 3)];
}

const near = (a, b, tol = 40) => a.every((v, i) => Math.abs(v - b[i]) <= tol);

describe('screen recordings', () => {
  let s, browser, page, dir;
  const api = (method, p, body) => ctx.server.api(method, `/v1/sessions/${s.id}${p}`, body);
  const download = async (id, name) => {
    const res = await fetch(`${ctx.server.base}/v1/sessions/${s.id}/recordings/${id}`,
                            { headers: { authorization: `Bearer ${ctx.server.key}` } });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'video/mp4');
    const file = path.join(dir, name);
    fs.writeFileSync(file, Buffer.from(await res.arrayBuffer()));
    return file;
  };
  const stopped = (id) => waitFor(async () => {
    const r = (await api('GET', '/recordings')).json.recordings.find((x) => x.id === id);
    return r && r.status !== 'recording' && r.status !== 'stopping' && r;
  }, { timeoutMs: 60000, intervalMs: 250, what: `recording ${id} to stop` });

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-rec-'));
    s = await ctx.server.createSession({ resolution: { width: 1280, height: 800 } });
    browser = await chromium.connectOverCDP(s.cdp_url);
    page = browser.contexts()[0].pages()[0];
    // Green page, a box that moves: frames differ, and the background is known.
    await page.setContent(`<!doctype html><style>body{margin:0;background:rgb(0,160,0)}
      #b{position:absolute;top:100px;width:80px;height:80px;background:rgb(0,0,200)}</style>
      <div id=b></div><script>let x = 0;
      (function f() { x = (x + 7) % 1000; b.style.left = x + 'px'; requestAnimationFrame(f); })();
      </script>`);
    await page.bringToFront();
  });
  after(async () => {
    await browser?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('a 10 s recording plays for 10 s and shows the page', async () => {
    const r = await api('POST', '/recordings', { fps: 10, max_duration_s: 10 });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.status, 'recording');
    assert.match(r.json.id, /^rec_[a-z0-9]{20}$/);
    // While it runs, what is written so far already plays.
    const partial = await waitFor(async () => {
      const file = await download(r.json.id, 'partial.mp4');
      return fs.statSync(file).size > 0 && probe(file).frames >= 1 && file;
    }, { timeoutMs: 9000, intervalMs: 500, what: 'a first fragment' });
    assert.equal(probe(partial).codec, 'h264');
    const done = await stopped(r.json.id);
    assert.equal(done.status, 'stopped', JSON.stringify(done));
    assert.equal(done.reason, 'max_duration');
    const file = await download(r.json.id, 'ten.mp4');
    const p = probe(file);
    assert.equal(p.codec, 'h264');
    assert.deepEqual([p.width, p.height], [1280, 800]);
    assert.ok(Math.abs(p.duration - 10) <= 1, `duration ${p.duration}`);
    assert.ok(Math.abs(p.frames - 100) <= 10, `frames ${p.frames}`);
    assert.equal(fs.statSync(file).size, done.bytes);
    // At rest it is sealed: the state dir holds no frame of it in the clear.
    const kept = fs.readFileSync(path.join(ctx.server.stateDir, 'recordings', s.id, `${r.json.id}.mp4`));
    assert.equal(kept.subarray(0, 10).toString('latin1'), 'CABINSEAL\x01');
    assert.equal(kept.indexOf(fs.readFileSync(file).subarray(0, 4096)), -1);
    // The page's green, below its toolbar, in a frame from the middle.
    const green = await page.evaluate(() => [window.screenX + 10,
      window.screenY + (window.outerHeight - window.innerHeight) + 400]);
    assert.ok(near(pixelAt(file, 5, ...green), [0, 160, 0]),
              `pixel ${pixelAt(file, 5, ...green)} at ${green}`);
  });

  test('stop ends it early; a size limit stops it cleanly; delete removes it', async () => {
    const r = await api('POST', '/recordings', { fps: 15, quality: 100 });
    assert.equal(r.status, 201, r.text);
    await waitFor(async () => (await api('GET', '/recordings')).json.recordings
      .some((x) => x.id === r.json.id));
    const stop = await api('POST', `/recordings/${r.json.id}/stop`);
    assert.equal(stop.status, 200, stop.text);
    assert.equal(stop.json.status, 'stopped');
    assert.equal(stop.json.reason, 'stopped');
    assert.ok(probe(await download(r.json.id, 'early.mp4')).frames >= 1);

    // Noise does not compress: the limit comes within seconds.
    await page.setContent(`<canvas id=c width=640 height=400 style="width:100vw;height:100vh"></canvas>
      <script>const g = c.getContext('2d'); const img = g.createImageData(640, 400);
      (function f() { const d = new Uint32Array(img.data.buffer);
        for (let i = 0; i < d.length; i++) d[i] = (Math.random() * 0xffffffff) | 0xff000000;
        g.putImageData(img, 0, 0); requestAnimationFrame(f); })();</script>`);
    const small = await api('POST', '/recordings', { fps: 30, quality: 100, max_mb: 1 });
    assert.equal(small.status, 201, small.text);
    const done = await stopped(small.json.id);
    assert.equal(done.reason, 'max_size', JSON.stringify(done));
    const p = probe(await download(small.json.id, 'small.mp4'));
    assert.ok(p.frames >= 1 && p.codec === 'h264', JSON.stringify(p));

    const del = await api('DELETE', `/recordings/${small.json.id}`);
    assert.equal(del.status, 200, del.text);
    const gone = await api('GET', `/recordings/${small.json.id}`);
    assert.equal(gone.status, 404);
    assert.equal(gone.json.error.code, 'recording_not_found');

    for (const bad of [{ fps: 0 }, { fps: 31 }, { quality: 0 }, { max_mb: 0 }, { codec: 'vp9' }]) {
      const b = await api('POST', '/recordings', bad);
      assert.equal(b.status, 400, JSON.stringify(bad));
    }
  });

  test('a recording under way is kept when its session ends', async () => {
    const r = await api('POST', '/recordings', { fps: 5 });
    assert.equal(r.status, 201, r.text);
    await waitFor(async () => (await api('GET', '/recordings')).json.recordings
      .some((x) => x.id === r.json.id));
    await browser.close();
    browser = null;
    assert.equal((await ctx.server.api('DELETE', `/v1/sessions/${s.id}`)).status, 200);
    const kept = (await api('GET', '/recordings')).json.recordings.find((x) => x.id === r.json.id);
    assert.equal(kept.status, 'stopped', JSON.stringify(kept));
    assert.equal(kept.reason, 'session_ended');
    const ended = await ctx.server.api('GET', `/v1/sessions/${s.id}`);
    assert.ok(ended.json.recordings.some((x) => x.id === r.json.id && x.status === 'stopped'),
              JSON.stringify(ended.json.recordings));
    assert.ok(probe(await download(r.json.id, 'ended.mp4')).frames >= 1);
  });

  test('a create can start a recording with the session', async () => {
    const bad = await ctx.server.api('POST', '/v1/sessions', { record: { fps: 31 } });
    assert.equal(bad.status, 400, bad.text);
    assert.match(bad.json.error.message, /record\.fps/);

    s = await ctx.server.createSession({ start_url: 'data:text/html,<body style="background:rgb(0,160,0)">',
                                        record: { fps: 5, max_duration_s: 4 } });
    assert.equal(s.recordings.length, 1, JSON.stringify(s.recordings));
    const id = s.recordings[0].id;
    assert.equal(s.recordings[0].status, 'recording');
    const done = await stopped(id);
    assert.equal(done.reason, 'max_duration', JSON.stringify(done));
    assert.equal(done.fps, 5);
    const p = probe(await download(id, 'created.mp4'));
    assert.equal(p.codec, 'h264');
    assert.ok(Math.abs(p.duration - 4) <= 1, `duration ${p.duration}`);
    await ctx.server.deleteSession(s.id);
  });
});
