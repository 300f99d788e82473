// Egress proxy benchmark, in one run on one local upstream: CONNECT tunnels through cabind's proxy
// (the client inside a sandbox, as a sandbox's programs use it), through squid and tinyproxy
// (Debian's, on the host) and straight to the upstream; and HTTPS requests whose Authorization
// placeholder becomes the secret, through cabind's opened-up tunnels and through mitmproxy
// (Debian's mitmdump, with an addon doing the same replacement).
import { execFile, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { freePort, startCabind, waitFor } from '../tests/integration/helpers.mjs';
import { summary } from './stats.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const CLIENT = fs.readFileSync(path.join(HERE, 'egress_client.cjs'), 'utf8');
export const TARGET_THROUGHPUT = 0.9;  // of squid's
export const TARGET_ADDED_TTFB_US = 1000;
export const TARGET_INJECT = 3;  // times mitmproxy's rate
const SECRET = 'bench_secret_value_0123456789';
const NAME = 'bench.test';  // the secret's host, over HTTPS
const PLAIN = 'tunnel.test';  // plain tunnels: a host bound to a secret is always opened up

function tool(bin, pkg) {
  if (!fs.existsSync(bin)) throw new Error(`${bin} not found (apt install ${pkg})`);
  return bin;
}

function squidConf(dir, port) {
  return `http_port 127.0.0.1:${port}
http_access allow all
cache deny all
cache_mem 8 MB
access_log none
cache_store_log none
cache_log ${dir}/squid-cache.log
pid_filename ${dir}/squid.pid
coredump_dir ${dir}
workers 1
shutdown_lifetime 0 seconds
`;
}

function tinyproxyConf(dir, port) {
  return `Port ${port}
Listen 127.0.0.1
Timeout 600
MaxClients 256
LogLevel Critical
LogFile "${dir}/tinyproxy.log"
PidFile "${dir}/tinyproxy.pid"
${process.getuid() === 0 ? 'User nobody\nGroup nogroup\n' : ''}`;
}

// Replaces the placeholder in request headers, as cabind does for a bound host.
function mitmAddon(placeholder) {
  return `PLACEHOLDER = ${JSON.stringify(placeholder)}
VALUE = ${JSON.stringify(SECRET)}

def request(flow):
    for name, value in flow.request.headers.items():
        if PLACEHOLDER in value:
            flow.request.headers[name] = value.replace(PLACEHOLDER, VALUE)
`;
}

function portOpen(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => { s.destroy(); resolve(true); });
    s.on('error', () => resolve(false));
  });
}

// The upstream: /small, /big/N over HTTP; /echo over HTTPS, which checks the secret arrived.
function upstreams(certs) {
  let badSecrets = 0;
  const plain = http.createServer((req, res) => {
    const big = /^\/big\/(\d+)$/.exec(req.url);
    if (big) {
      const total = Number(big[1]);
      res.writeHead(200, { 'Content-Length': total });
      const chunk = Buffer.alloc(256 * 1024, 120);
      let left = total;
      const pump = () => {
        while (left > 0) {
          const piece = left >= chunk.length ? chunk : chunk.subarray(0, left);
          left -= piece.length;
          if (!res.write(piece)) return res.once('drain', pump);
        }
        res.end();
      };
      return pump();
    }
    res.writeHead(200, { 'Content-Length': 2 });
    res.end('ok');
  });
  const tlsServer = https.createServer({ key: certs.key, cert: certs.cert }, (req, res) => {
    if (req.headers.authorization !== `Bearer ${SECRET}`) badSecrets++;
    res.writeHead(200, { 'Content-Length': 2 });
    res.end('ok');
  });
  plain.keepAliveTimeout = 60000;
  tlsServer.keepAliveTimeout = 60000;
  return { plain, tls: tlsServer, bad: () => badSecrets };
}

function makeCerts(dir) {
  const at = (f) => path.join(dir, f);
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  const quiet = { stdio: 'ignore' };
  execFileSync('openssl', ['req', '-x509', ...ec, '-days', '2', '-subj', '/CN=Bench CA',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign',
    '-keyout', at('ca.key'), '-out', at('ca.pem')], quiet);
  execFileSync('openssl', ['req', ...ec, '-subj', `/CN=${NAME}`, '-keyout', at('key.pem'),
    '-out', at('csr.pem')], quiet);
  fs.writeFileSync(at('ext.cnf'), `subjectAltName=DNS:${NAME}\nextendedKeyUsage=serverAuth\n`);
  execFileSync('openssl', ['x509', '-req', '-in', at('csr.pem'), '-CA', at('ca.pem'), '-CAkey',
    at('ca.key'), '-CAcreateserial', '-days', '2', '-extfile', at('ext.cnf'), '-out', at('cert.pem')],
  quiet);
  return { ca: at('ca.pem'), key: fs.readFileSync(at('key.pem')), cert: fs.readFileSync(at('cert.pem')) };
}

// The client on the host, in a process of its own (the upstreams run in this one).
function hostClient(args) {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [path.join(HERE, 'egress_client.cjs'), ...args], { maxBuffer: 64 << 20 },
             (err, stdout, stderr) => (err ? reject(new Error(`${args.join(' ')}: ${stderr || err}`))
               : resolve(JSON.parse(stdout))));
  });
}

// The client inside session `id`: the sandbox's own node, through its proxy on 127.0.0.1:3128.
async function sandboxClient(cabin, id, args) {
  const r = await cabin.api('POST', `/v1/sessions/${id}/exec`, {
    argv: ['node', '-', ...args], stdin: CLIENT, timeout_ms: 300000,
  });
  if (r.status !== 200 || r.json.exit_code !== 0) {
    throw new Error(`the client in the sandbox (${args.join(' ')}): ${r.text}`);
  }
  return JSON.parse(r.json.stdout);
}

export async function benchEgress({ ttfbN, bigMiB, rounds, injectConns, injectMs, log }) {
  const squid = tool(process.env.CABIN_SQUID || '/usr/sbin/squid', 'squid');
  const tinyproxy = tool(process.env.CABIN_TINYPROXY || '/usr/bin/tinyproxy', 'tinyproxy');
  const mitmdump = tool(process.env.CABIN_MITMDUMP || '/usr/bin/mitmdump', 'mitmproxy');
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'cabin-bench-egress-'));
  fs.chmodSync(dir, 0o777);  // squid and tinyproxy drop to their own users
  const procs = [];
  let cabin;
  let up;
  try {
    const certs = makeCerts(dir);
    up = upstreams(certs);
    up.plain.listen(0, '127.0.0.1');
    up.tls.listen(0, '127.0.0.1');
    await Promise.all([up.plain, up.tls].map((s) => new Promise((r) => s.once('listening', r))));
    const plainPort = up.plain.address().port;
    const tlsPort = up.tls.address().port;
    const target = `${PLAIN}:${plainPort}`;
    const tlsTarget = `${NAME}:${tlsPort}`;

    const ports = { squid: await freePort(), tinyproxy: await freePort(), mitm: await freePort() };
    fs.writeFileSync(path.join(dir, 'squid.conf'), squidConf(dir, ports.squid));
    fs.writeFileSync(path.join(dir, 'tinyproxy.conf'), tinyproxyConf(dir, ports.tinyproxy));
    procs.push(spawn(squid, ['-N', '-f', path.join(dir, 'squid.conf')], { stdio: 'ignore' }));
    procs.push(spawn(tinyproxy, ['-d', '-c', path.join(dir, 'tinyproxy.conf')], { stdio: 'ignore' }));

    cabin = await startCabind({
      args: ['--log-level', 'warn', '--egress-resolve', `${NAME}=127.0.0.1`,
             '--egress-resolve', `${PLAIN}=127.0.0.1`,
             '--egress-allow-host-cidr', '127.0.0.0/8', '--extra-ca-file', certs.ca],
    });
    const created = await cabin.api('POST', '/v1/sessions', {
      network: {
        mode: 'allowlist',
        allow: [{ host: NAME, ports: [tlsPort] }, { host: PLAIN, ports: [plainPort] }],
        secrets: [{ name: 'bench', value: SECRET, hosts: [NAME], ports: [tlsPort], format: 'Bearer {value}' }],
      },
    });
    if (created.status !== 201) throw new Error(`POST /v1/sessions -> ${created.status} ${created.text}`);
    const id = created.json.id;
    const placeholder = created.json.network.secrets[0].placeholder;

    // mitmproxy: trusts the upstream's CA, and its own CA is what the host client trusts.
    const confdir = path.join(dir, 'mitm');
    fs.mkdirSync(confdir);
    fs.writeFileSync(path.join(dir, 'inject.py'), mitmAddon(placeholder));
    procs.push(spawn(mitmdump, ['-q', '--listen-host', '127.0.0.1', '--listen-port', String(ports.mitm),
      '--set', `confdir=${confdir}`, '--set', `ssl_verify_upstream_trusted_ca=${certs.ca}`,
      '--set', 'http2=false', '--set', 'connection_strategy=lazy',
      '-s', path.join(dir, 'inject.py')], { stdio: 'ignore' }));
    for (const [name, port] of Object.entries(ports)) {
      await waitFor(() => portOpen(port), { timeoutMs: 30000, intervalMs: 100, what: `${name} to listen` });
    }
    const mitmCa = path.join(confdir, 'mitmproxy-ca-cert.pem');
    await waitFor(() => fs.existsSync(mitmCa), { timeoutMs: 10000, what: 'mitmproxy\'s CA' });

    const names = ['cabin', 'squid', 'tinyproxy', 'direct'];
    const run = async (name, mode, args) => {
      const proxy = { cabin: '127.0.0.1:3128', squid: `127.0.0.1:${ports.squid}`,
                      tinyproxy: `127.0.0.1:${ports.tinyproxy}`, direct: '-' }[name];
      // The proxies on the host would ask DNS for a name: they get the address.
      return name === 'cabin' ? sandboxClient(cabin, id, [mode, proxy, target, ...args])
        : hostClient([mode, proxy, `127.0.0.1:${plainPort}`, ...args]);
    };
    log(`egress: ${rounds} alternating rounds of ${ttfbN} tunnels and a ${bigMiB} MiB download; ` +
        `${injectConns} × ${injectMs} ms of injected HTTPS requests`);
    const ttfb = Object.fromEntries(names.map((k) => [k, []]));
    const dl = Object.fromEntries(names.map((k) => [k, []]));
    for (const n of names) await run(n, 'ttfb', ['5']);  // warm-up
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 ? [...names].reverse() : names;
      for (const n of order) ttfb[n].push(...(await run(n, 'ttfb', [String(ttfbN)])).samples);
      for (const n of order) dl[n].push((await run(n, 'download', [String(bigMiB << 20)])).mib_per_s);
    }
    const inject = { cabin: [], mitmproxy: [] };
    const badBefore = up.bad();
    for (let r = 0; r < rounds; r++) {
      const pair = [
        ['cabin', () => sandboxClient(cabin, id, ['inject', '127.0.0.1:3128', tlsTarget,
          String(injectConns), String(injectMs), '-', `Bearer ${placeholder}`, NAME])],
        ['mitmproxy', () => hostClient(['inject', `127.0.0.1:${ports.mitm}`, `127.0.0.1:${tlsPort}`,
          String(injectConns), String(injectMs), mitmCa, `Bearer ${placeholder}`, NAME])],
      ];
      for (const [n, f] of r % 2 ? pair.reverse() : pair) {
        const got = await f();
        if (got.bad) throw new Error(`${n}: ${got.bad} injected requests failed`);
        inject[n].push(got.rps);
      }
    }
    const wrongSecrets = up.bad() - badBefore;
    if (wrongSecrets) throw new Error(`${wrongSecrets} requests reached the upstream without the secret`);

    const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
    const res = {
      rounds, ttfb_n: ttfbN, big_mib: bigMiB, inject_conns: injectConns, inject_ms: injectMs,
      ttfb_us: Object.fromEntries(names.map((n) => [n, summary(ttfb[n])])),
      download_mib_per_s: Object.fromEntries(names.map((n) => [n, median(dl[n])])),
      inject_rps: { cabin: median(inject.cabin), mitmproxy: median(inject.mitmproxy) },
      rounds_detail: { download: dl, inject },
    };
    res.throughput_ratio = median(dl.cabin.map((c, i) => c / dl.squid[i]));
    res.added_ttfb_us = res.ttfb_us.cabin.p50 - res.ttfb_us.direct.p50;
    res.inject_ratio = median(inject.cabin.map((c, i) => c / inject.mitmproxy[i]));
    res.met = res.throughput_ratio >= TARGET_THROUGHPUT && res.added_ttfb_us <= TARGET_ADDED_TTFB_US &&
      res.inject_ratio >= TARGET_INJECT;
    return res;
  } finally {
    for (const p of procs) p.kill('SIGTERM');
    up?.plain.close();
    up?.tls.close();
    if (cabin) await cabin.stop();
    await fsp.rm(dir, { recursive: true, force: true });
  }
}

export function egressRows(r, fmt, mark) {
  const t = r.ttfb_us;
  const d = r.download_mib_per_s;
  return [
    [`egress tunnel ${r.big_mib} MiB (MiB/s), vs squid`, fmt(d.cabin, 0), fmt(d.squid, 0),
     `${fmt(r.throughput_ratio, 2)}x`, `≥ ${TARGET_THROUGHPUT}x`, mark(r.throughput_ratio >= TARGET_THROUGHPUT)],
    ['egress tunnel (MiB/s), tinyproxy | direct', '', `${fmt(d.tinyproxy, 0)} | ${fmt(d.direct, 0)}`, '', '', ''],
    ['egress time to first byte p50 (µs), vs direct', fmt(t.cabin.p50, 0), fmt(t.direct.p50, 0),
     `+${fmt(r.added_ttfb_us, 0)} µs`, `≤ +${TARGET_ADDED_TTFB_US} µs`, mark(r.added_ttfb_us <= TARGET_ADDED_TTFB_US)],
    ['egress time to first byte p50 (µs), squid | tinyproxy', '', `${fmt(t.squid.p50, 0)} | ${fmt(t.tinyproxy.p50, 0)}`, '', '', ''],
    [`egress injected HTTPS, ${r.inject_conns} conns (req/s), vs mitmproxy`, fmt(r.inject_rps.cabin, 0),
     fmt(r.inject_rps.mitmproxy, 0), `${fmt(r.inject_ratio, 2)}x`, `≥ ${TARGET_INJECT}x`,
     mark(r.inject_ratio >= TARGET_INJECT)],
  ];
}
