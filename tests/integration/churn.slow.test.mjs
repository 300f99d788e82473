// Churn: real namespace sessions (real Xvfb and Chromium) created and deleted over and over, one
// at a time and four at a time. At least 99.9 % of the cycles succeed, and afterwards nothing of
// them is left on the host (processes, cgroups, mounts, run dir entries, files), cabind holds no
// more descriptors than before, and its RSS grew by less than RSS_GROWTH_BOUND.
//
// CABIN_CHURN_CYCLES sets the number of cycles (half sequential, half four at a time); the default
// keeps the test within a few minutes on a 2-core machine. docs/operations.md has the figures of
// a 1,000-cycle run.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { test } from 'node:test';

import { findDirs, startCabind, waitFor } from './helpers.mjs';

const CYCLES = Number(process.env.CABIN_CHURN_CYCLES || 80);
const CONCURRENCY = 4;
// glibc keeps freed memory in its arenas, one per thread that allocated: what a run of this test
// leaves is bounded, not zero.
const RSS_GROWTH_BOUND = 24 << 20;

// Requests on connections of their own (Connection: close), so that no idle keep-alive
// connection of this client is among cabind's descriptors when they are counted.
function request(server, method, p, body) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request({
      host: '127.0.0.1', port: server.port, path: p, method, agent: false,
      headers: {
        authorization: `Bearer ${server.key}`, connection: 'close',
        ...(payload ? { 'content-type': 'application/json' } : {}),
      },
    }, (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        let json = null;
        try {
          json = JSON.parse(text);
        } catch {
          // not JSON
        }
        resolve({ status: res.statusCode, text, json });
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

function fdCount(pid) {
  return fs.readdirSync(`/proc/${pid}/fd`).length;
}

function rssBytes(pid) {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]) * 1024;
}

function readText(p) {
  try {
    return fs.readFileSync(p, 'utf8');
  } catch {
    return '';
  }
}

// Everything on the host that names one of `ids`, found in one pass: processes (command line or
// cgroup), cgroup directories, mounts, run dir entries, and files in the host's temporary dirs.
function leftoversOf(ids, runDir) {
  const idRe = /ses_[a-z0-9]{20}/g;
  const mine = (s) => (s.match(idRe) || []).filter((id) => ids.has(id));
  const found = [];
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const hit = mine(readText(`/proc/${pid}/cmdline`)).concat(mine(readText(`/proc/${pid}/cgroup`)));
    if (hit.length) found.push(`process ${pid} of ${hit[0]}`);
  }
  for (const d of findDirs('/sys/fs/cgroup', (name) => mine(name).length > 0, 4)) {
    found.push(`cgroup ${d}`);
  }
  for (const line of readText('/proc/self/mountinfo').split('\n')) {
    if (mine(line).length) found.push(`mount ${line}`);
  }
  // Sessions' dirs, not cabind's own key file there.
  for (const e of fs.readdirSync(runDir)) if (mine(e).length) found.push(`run dir entry ${e}`);
  for (const dir of ['/tmp', '/dev/shm', '/var/tmp']) {
    for (const e of fs.readdirSync(dir)) if (mine(e).length) found.push(`file ${dir}/${e}`);
  }
  return found;
}

test(`${CYCLES} create/delete cycles of real sessions, one and ${CONCURRENCY} at a time, leak nothing`,
  { timeout: Math.max(600e3, CYCLES * 4000) }, async () => {
    const server = await startCabind({ args: ['--max-sessions', String(CONCURRENCY)] });
    const ids = new Set();
    const failures = [];
    let cycles = 0;
    const cycle = async () => {
      cycles += 1;
      const c = await request(server, 'POST', '/v1/sessions', {});
      if (c.status !== 201) {
        failures.push(`create: ${c.status} ${c.text}`);
        return;
      }
      ids.add(c.json.id);
      const d = await request(server, 'DELETE', `/v1/sessions/${c.json.id}`);
      if (d.status !== 200) failures.push(`delete ${c.json.id}: ${d.status} ${d.text}`);
    };
    try {
      // One cycle first: what is made once (the database's pages, the pool threads' arenas, the
      // logs dir) is not a leak.
      await cycle();
      assert.deepEqual(failures, []);
      await waitFor(() => leftoversOf(ids, server.runDir).length === 0,
                    { what: 'the first session to leave nothing' });
      const baseFds = fdCount(server.pid);
      const baseRss = rssBytes(server.pid);

      const started = Date.now();
      const sequential = Math.floor(CYCLES / 2);
      for (let i = 1; i < sequential; i++) await cycle();
      const seqMs = Date.now() - started;
      const parallelStarted = Date.now();
      let next = sequential;
      await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
        while (next < CYCLES) {
          next += 1;
          await cycle();
        }
      }));
      const parMs = Date.now() - parallelStarted;

      // The sessions were deleted; their sandboxes are gone once DELETE answered, their cgroups
      // a moment later at most.
      let left = [];
      await waitFor(() => {
        left = leftoversOf(ids, server.runDir);
        return left.length === 0;
      }, { timeoutMs: 15000, what: 'nothing of the sessions left' }).catch(() => {});
      assert.deepEqual(left, []);
      let fds = fdCount(server.pid);
      await waitFor(() => (fds = fdCount(server.pid)) <= baseFds,
                    { timeoutMs: 10000, what: 'cabind\'s descriptors back to their baseline' })
        .catch(() => {});
      const rss = rssBytes(server.pid);
      const list = await request(server, 'GET', '/v1/sessions');
      assert.equal(list.status, 200, list.text);
      // Ended sessions keep their last output in the logs dir (GET .../logs); nothing else stays.
      const sessionLog = (f) => {
        const m = /^(ses_[a-z0-9]{20})\.(log|network\.jsonl)$/.exec(f);
        return m && ids.has(m[1]);
      };
      const strays = fs.readdirSync(path.join(server.stateDir, 'logs')).filter((f) => !sessionLog(f));

      const ok = cycles - failures.length;
      const report = {
        cycles, ok, rate: ok / cycles, sequential_ms_per_cycle: Math.round(seqMs / (sequential - 1)),
        parallel_ms_per_cycle: Math.round(parMs / (CYCLES - sequential)),
        fds_before: baseFds, fds_after: fds, rss_before_mib: +(baseRss / 2 ** 20).toFixed(1),
        rss_after_mib: +(rss / 2 ** 20).toFixed(1),
      };
      process.stderr.write(`churn: ${JSON.stringify(report)}\n`);
      assert.ok(failures.length <= Math.floor(cycles * 0.001),
                `${failures.length} of ${cycles} cycles failed:\n${failures.slice(0, 10).join('\n')}`);
      assert.ok(fds <= baseFds, `cabind holds ${fds} descriptors, ${baseFds} before`);
      assert.ok(rss - baseRss < RSS_GROWTH_BOUND,
                `cabind's RSS grew by ${((rss - baseRss) / 2 ** 20).toFixed(1)} MiB`);
      assert.deepEqual(list.json.sessions, [], 'no session is live');
      assert.deepEqual(strays, [], 'no file in the logs dir but the sessions\' own');
    } finally {
      const result = await server.stop();
      assert.equal(result.code, 0, `cabind's exit\n${server.logTail(30)}`);
    }
  });
