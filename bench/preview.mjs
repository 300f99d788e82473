// Preview proxy benchmark: the same backend program (preview_backend.mjs) inside a sandbox behind
// Cabin's path-based preview, and on the host behind nginx (Debian's, as a reverse proxy with
// upstream keep-alive), in one run. Small answers: requests per second and latency percentiles
// with concurrent keep-alive connections; a large answer: throughput.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { freePort, waitFor } from '../tests/integration/helpers.mjs';
import { summary } from './stats.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BACKEND = fs.readFileSync(path.join(HERE, 'preview_backend.mjs'), 'utf8');
const SANDBOX_PORT = 9000;
export const TARGET_RPS = 0.8;
export const TARGET_P99 = 1.25;

function nginxConf(dir, listen, backend) {
  return `daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream backend { server 127.0.0.1:${backend}; keepalive 64; }
  server {
    listen 127.0.0.1:${listen};
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      # The forwarding fields Cabin sets too, so both backends parse the same request.
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $remote_addr;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Forwarded-Host $http_host;
      proxy_set_header Forwarded "for=\\"$remote_addr\\";host=\\"$http_host\\";proto=$scheme";
      proxy_max_temp_file_size 0;
    }
  }
}
`;
}

// CPU time (user + system) a process has used, in ms; NaN when unknown.
export function cpuMs(pid) {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) * (1000 / 100);
  } catch {
    return NaN;
  }
}

// `conns` keep-alive connections each sending GET `path` back to back for `ms`.
export async function load(url, headers, { conns, ms }) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: conns });
  const lat = [];
  let errors = 0;
  const deadline = Date.now() + ms;
  const one = () => new Promise((resolve) => {
    const t0 = process.hrtime.bigint();
    const req = http.get(url, { agent, headers }, (res) => {
      res.on('data', () => {});
      res.on('end', () => {
        if (res.statusCode === 200) lat.push(Number(process.hrtime.bigint() - t0) / 1000);
        else errors++;
        resolve();
      });
    });
    req.on('error', () => { errors++; resolve(); });
  });
  const t0 = Date.now();
  await Promise.all(Array.from({ length: conns }, async () => {
    while (Date.now() < deadline) await one();
  }));
  const secs = (Date.now() - t0) / 1000;
  agent.destroy();
  return { rps: lat.length / secs, errors, latency_us: summary(lat) };
}

async function download(url, headers, bytes) {
  const t0 = process.hrtime.bigint();
  let n = 0;
  await new Promise((resolve, reject) => {
    http.get(url, { headers, agent: false }, (res) => {
      res.on('data', (d) => { n += d.length; });
      res.on('end', resolve);
      res.on('error', reject);
    }).on('error', reject);
  });
  if (n !== bytes) throw new Error(`downloaded ${n} of ${bytes} bytes from ${url}`);
  return (bytes / 2 ** 20) / (Number(process.hrtime.bigint() - t0) / 1e9);
}

// Starts preview_backend.mjs inside session `id` and opens a path-based preview of it: returns the
// preview's base URL (no trailing slash) and the preview cookie.
export async function sandboxBackend(cabin, id) {
  const started = await cabin.api('POST', `/v1/sessions/${id}/exec`, {
    argv: ['sh', '-c', `cd "\${HOME:-/tmp}" && cat > backend.mjs && (setsid node backend.mjs ${SANDBOX_PORT} > backend.log 2>&1 < /dev/null &)`],
    stdin: BACKEND,
  });
  if (started.json?.exit_code !== 0) throw new Error(`starting the backend: ${started.text}`);
  const pv = await cabin.api('POST', `/v1/sessions/${id}/previews`, { port: SANDBOX_PORT });
  if (pv.status !== 201) throw new Error(`POST previews -> ${pv.status} ${pv.text}`);
  const first = await fetch(pv.json.path_url, { redirect: 'manual' });
  const cookie = first.headers.get('set-cookie').split(';')[0];
  const url = new URL(pv.json.path_url);
  return { base: url.origin + url.pathname.replace(/\/$/, ''), cookie };
}

export async function benchPreview(cabin, { conns, ms, bigMiB, rounds, log }) {
  const nginxBin = process.env.CABIN_NGINX || '/usr/sbin/nginx';
  if (!fs.existsSync(nginxBin)) throw new Error(`${nginxBin} not found (apt install nginx)`);
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'cabin-bench-nginx-'));
  const procs = [];
  let session;
  try {
    // The backend on the host, and nginx in front of it.
    const hostPort = await freePort();
    const nginxPort = await freePort();
    fs.writeFileSync(path.join(dir, 'backend.mjs'), BACKEND);
    procs.push(spawn(process.execPath, [path.join(dir, 'backend.mjs'), String(hostPort)], { stdio: 'ignore' }));
    fs.writeFileSync(path.join(dir, 'nginx.conf'), nginxConf(dir, nginxPort, hostPort));
    const nginx = spawn(nginxBin, ['-c', path.join(dir, 'nginx.conf'), '-p', dir], { stdio: 'ignore' });
    procs.push(nginx);

    // The same backend inside a sandbox, behind a preview.
    const created = await cabin.api('POST', '/v1/sessions', {});
    if (created.status !== 201) throw new Error(`POST /v1/sessions -> ${created.status} ${created.text}`);
    session = created.json;
    const { base: cabinBase, cookie } = await sandboxBackend(cabin, session.id);
    const nginxBase = `http://127.0.0.1:${nginxPort}`;
    const sides = {
      cabin: { base: cabinBase, headers: { cookie }, pid: cabin.pid },
      nginx: { base: nginxBase, headers: {}, pid: nginx.pid },
    };
    for (const [name, s] of Object.entries(sides)) {
      await waitFor(async () => (await fetch(`${s.base}/small`, { headers: s.headers })).status === 200,
                    { timeoutMs: 20000, intervalMs: 100, what: `the backend behind ${name}` });
    }

    log(`preview proxy: ${conns} connections × ${ms} ms, ${rounds} alternating rounds; ${bigMiB} MiB downloads`);
    const small = { cabin: [], nginx: [] };
    const big = { cabin: [], nginx: [] };
    // Warm-up, then alternate so drifts of the machine hit both sides.
    for (const s of Object.values(sides)) await load(`${s.base}/small`, s.headers, { conns, ms: 500 });
    // Small requests first, every round in the other order, so that neither side always follows
    // the other; the downloads after, so that their aftermath (a backend collecting garbage)
    // falls on no load round.
    const order = (r) => (r % 2 ? Object.entries(sides).reverse() : Object.entries(sides));
    for (let r = 0; r < rounds; r++) {
      for (const [name, s] of order(r)) {
        const c0 = cpuMs(s.pid);
        const run = await load(`${s.base}/small`, s.headers, { conns, ms });
        // What the proxy itself spends: less noisy than rates on a shared machine.
        run.cpu_us_per_request = ((cpuMs(s.pid) - c0) * 1000) / (run.rps * (ms / 1000));
        small[name].push(run);
      }
    }
    for (let r = 0; r < rounds; r++) {
      for (const [name, s] of order(r)) {
        big[name].push(await download(`${s.base}/big/${bigMiB << 20}`, s.headers, bigMiB << 20));
      }
    }
    const merge = (runs) => {
      const rps = runs.reduce((a, r) => a + r.rps, 0) / runs.length;
      const pick = (k) => runs.map((r) => r.latency_us[k]).sort((a, b) => a - b)[Math.floor(runs.length / 2)];
      return { rps, p50_us: pick('p50'), p99_us: pick('p99'),
               cpu_us_per_request: runs.map((r) => r.cpu_us_per_request).sort((a, b) => a - b)[Math.floor(runs.length / 2)],
               errors: runs.reduce((a, r) => a + r.errors, 0) };
    };
    const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
    const res = {
      conns, ms, rounds, big_mib: bigMiB,
      small: { cabin: merge(small.cabin), nginx: merge(small.nginx) },
      big_mib_per_s: { cabin: median(big.cabin), nginx: median(big.nginx) },
      rounds_detail: small.cabin.map((c, i) => ({
        cabin_rps: c.rps, nginx_rps: small.nginx[i].rps,
        cabin_p99_us: c.latency_us.p99, nginx_p99_us: small.nginx[i].latency_us.p99,
        cabin_mib_per_s: big.cabin[i], nginx_mib_per_s: big.nginx[i],
      })),
    };
    // Each round runs both sides back to back, so its ratio is taken while the machine is in one
    // state; the median of the rounds' ratios is what drifts on a shared machine move least.
    const pairs = (f) => median(res.rounds_detail.map(f));
    res.rps_ratio = pairs((r) => r.cabin_rps / r.nginx_rps);
    res.p99_ratio = pairs((r) => r.cabin_p99_us / r.nginx_p99_us);
    res.big_ratio = pairs((r) => r.cabin_mib_per_s / r.nginx_mib_per_s);
    res.met = res.rps_ratio >= TARGET_RPS && res.p99_ratio <= TARGET_P99 && res.big_ratio >= TARGET_RPS;
    return res;
  } finally {
    for (const p of procs) p.kill('SIGTERM');
    if (session) await cabin.api('DELETE', `/v1/sessions/${session.id}`);
    await fsp.rm(dir, { recursive: true, force: true });
  }
}

export function previewRows(r, fmt, mark) {
  return [
    [`preview small GET, ${r.conns} conns (req/s)`, fmt(r.small.cabin.rps, 0), fmt(r.small.nginx.rps, 0),
     `${fmt(r.rps_ratio, 2)}x`, `≥ ${TARGET_RPS}x`, mark(r.rps_ratio >= TARGET_RPS)],
    ['preview small GET p50 (µs)', fmt(r.small.cabin.p50_us, 0), fmt(r.small.nginx.p50_us, 0),
     `${fmt(r.small.cabin.p50_us / r.small.nginx.p50_us, 2)}x`, '', ''],
    ['preview small GET p99 (µs)', fmt(r.small.cabin.p99_us, 0), fmt(r.small.nginx.p99_us, 0),
     `${fmt(r.p99_ratio, 2)}x`, `≤ ${TARGET_P99}x`, mark(r.p99_ratio <= TARGET_P99)],
    ['preview proxy CPU per small GET (µs)', fmt(r.small.cabin.cpu_us_per_request, 0),
     fmt(r.small.nginx.cpu_us_per_request, 0),
     `${fmt(r.small.cabin.cpu_us_per_request / r.small.nginx.cpu_us_per_request, 2)}x`, '', ''],
    [`preview ${r.big_mib} MiB download (MiB/s)`, fmt(r.big_mib_per_s.cabin, 0), fmt(r.big_mib_per_s.nginx, 0),
     `${fmt(r.big_ratio, 2)}x`, `≥ ${TARGET_RPS}x`, mark(r.big_ratio >= TARGET_RPS)],
  ];
}
