// Files in and out of a sandbox: PUT and GET /v1/sessions/{id}/files (streamed through cabind
// and the agent) side by side with what a client of an exec-only API does (the bytes as base64
// through exec's stdin and stdout, in the pieces its limits allow: 1 MiB in, 16 MiB out), and with
// a plain copy of the same file on the host's disk. Reported: MB/s at the median of the rounds,
// and the ratios.
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { summary } from './stats.mjs';

const secs = (t0) => Number(process.hrtime.bigint() - t0) / 1e9;
const EXEC_IN = 720 * 1024;  // raw bytes whose base64, in JSON, fits a 1 MiB request body
const EXEC_OUT = 12 * 1024 * 1024;  // raw bytes whose base64 fits 16 MiB of stdout

export async function benchFiles(cabin, { mib = 64, rounds = 3, log = () => {} } = {}) {
  const data = randomBytes(mib * 1024 * 1024);
  const want = createHash('sha256').update(data).digest('hex');
  const mb = data.length / 1e6;
  const made = await cabin.api('POST', '/v1/sessions', {});
  if (made.status !== 201) throw new Error(`create -> ${made.status} ${made.text}`);
  const id = made.json.id;
  const auth = { authorization: `Bearer ${cabin.key}` };
  const url = (p) => `${cabin.base}/v1/sessions/${id}/files?path=${encodeURIComponent(p)}`;
  const exec = async (argv, stdin, maxOut = 1024) => {
    const r = await cabin.api('POST', `/v1/sessions/${id}/exec`,
                              { argv, stdin, max_output_bytes: maxOut, timeout_ms: 120000 });
    if (r.status !== 200 || r.json.exit_code !== 0) throw new Error(`exec -> ${r.status} ${r.text}`);
    return r.json.stdout;
  };
  const rate = { api_up: [], api_down: [], exec_up: [], exec_down: [], disk: [] };
  try {
    for (let i = 0; i < rounds; i++) {
      let t0 = process.hrtime.bigint();
      const up = await fetch(url('/tmp/bench.bin'), { method: 'PUT', headers: auth, body: data });
      const stored = await up.json();
      if (up.status !== 200 || stored.sha256 !== want) throw new Error(`PUT -> ${up.status}`);
      rate.api_up.push(mb / secs(t0));

      t0 = process.hrtime.bigint();
      const down = await fetch(url('/tmp/bench.bin'), { headers: auth });
      let got = 0;
      for await (const chunk of down.body) got += chunk.length;
      if (got !== data.length) throw new Error(`GET gave ${got} bytes`);
      rate.api_down.push(mb / secs(t0));

      t0 = process.hrtime.bigint();
      await exec(['sh', '-c', ': > /tmp/exec.bin']);
      for (let off = 0; off < data.length; off += EXEC_IN) {
        await exec(['sh', '-c', 'base64 -d >> /tmp/exec.bin'],
                   data.subarray(off, off + EXEC_IN).toString('base64'));
      }
      rate.exec_up.push(mb / secs(t0));

      t0 = process.hrtime.bigint();
      const parts = [];
      for (let off = 0; off < data.length; off += EXEC_OUT) {
        const out = await exec(['sh', '-c', `tail -c +${off + 1} /tmp/exec.bin | head -c ${EXEC_OUT} | base64 -w0`],
                               undefined, 16 * 1024 * 1024);
        parts.push(Buffer.from(out, 'base64'));
      }
      rate.exec_down.push(mb / secs(t0));
      if (createHash('sha256').update(Buffer.concat(parts)).digest('hex') !== want) {
        throw new Error('the exec round trip changed the bytes');
      }

      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-bench-files-'));
      try {
        fs.writeFileSync(path.join(dir, 'a'), data);
        t0 = process.hrtime.bigint();
        fs.copyFileSync(path.join(dir, 'a'), path.join(dir, 'b'));
        rate.disk.push(mb / secs(t0));
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
      log(`files: round ${i + 1} of ${rounds}`);
    }
  } finally {
    await cabin.api('DELETE', `/v1/sessions/${id}`);
  }
  const out = { mib, rounds };
  for (const [k, v] of Object.entries(rate)) out[k] = summary(v);
  return out;
}

export function filesRows(r, fmt) {
  const p = (k) => r[k].p50;
  return [
    [`upload ${r.mib} MiB, PUT /files vs exec base64 (MB/s)`, fmt(p('api_up')), fmt(p('exec_up')),
     `${fmt(p('api_up') / p('exec_up'), 1)}x`, '', ''],
    [`download ${r.mib} MiB, GET /files vs exec base64 (MB/s)`, fmt(p('api_down')),
     fmt(p('exec_down')), `${fmt(p('api_down') / p('exec_down'), 1)}x`, '', ''],
    [`upload vs a copy on the host's disk (MB/s)`, fmt(p('api_up')), fmt(p('disk')),
     `${fmt(p('api_up') / p('disk'), 2)}x`, '', ''],
    [`download vs a copy on the host's disk (MB/s)`, fmt(p('api_down')), fmt(p('disk')),
     `${fmt(p('api_down') / p('disk'), 2)}x`, '', ''],
  ];
}
