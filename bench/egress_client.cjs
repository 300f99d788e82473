// The egress benchmark's client, run the same way inside a sandbox (through cabind's proxy) and
// on the host (through squid, tinyproxy, mitmproxy, or straight to the upstream). CommonJS, so
// that `node - ARGS` can run it from stdin. Prints one JSON line.
//
//   ttfb     PROXY TARGET N            N tunnels one after another: µs from connecting to the
//                                      first byte of a small answer
//   download PROXY TARGET BYTES        one tunnel: MiB/s of a BYTES-long answer
//   inject   PROXY TARGET CONNS MS CA AUTH NAME
//                                      CONNS TLS tunnels to NAME, requests back to back for MS ms
//                                      with the header Authorization: AUTH; requests per second
//
// PROXY is host:port, or "-" for none; TARGET is name:port or 127.0.0.1:port (for proxies that
// would resolve a name through DNS).
'use strict';
const net = require('node:net');
const tls = require('node:tls');
const fs = require('node:fs');

const [mode, proxyArg, target, ...rest] = process.argv.slice(2);
const targetPort = Number(target.split(':')[1]);

// A socket to the target: through the proxy's CONNECT, or straight.
function open() {
  return new Promise((resolve, reject) => {
    if (proxyArg === '-') {
      const s = net.connect(targetPort, '127.0.0.1', () => resolve(s));
      s.once('error', reject);
      return;
    }
    const [ph, pp] = proxyArg.split(':');
    const s = net.connect(Number(pp), ph, () => {
      s.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
    });
    s.setNoDelay(true);
    let head = Buffer.alloc(0);
    const onData = (d) => {
      head = Buffer.concat([head, d]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      s.off('data', onData);
      if (!/^HTTP\/1\.[01] 200/.test(head.toString('latin1', 0, 12))) {
        reject(new Error(`CONNECT ${target}: ${head.toString('latin1', 0, end)}`));
        return;
      }
      if (end + 4 < head.length) s.unshift(head.subarray(end + 4));
      resolve(s);
    };
    s.on('data', onData);
    s.once('error', reject);
  });
}

// Reads one HTTP/1.1 answer with a Content-Length from `s`; resolves with its status.
function readAnswer(s, onFirstByte) {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    let want = -1;
    let status = 0;
    let first = true;
    const onData = (d) => {
      if (first) {
        first = false;
        if (onFirstByte) onFirstByte();
      }
      buf = buf.length ? Buffer.concat([buf, d]) : d;
      if (want < 0) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.toString('latin1', 0, end);
        status = Number(head.slice(9, 12));
        const m = /\r\ncontent-length: *(\d+)/i.exec(head);
        want = end + 4 + (m ? Number(m[1]) : 0);
      }
      if (buf.length >= want) {
        off();
        if (buf.length > want) s.unshift(buf.subarray(want));
        resolve(status);
      }
    };
    const onError = (err) => { off(); reject(err); };
    const onEnd = () => onError(new Error('the connection ended mid-answer'));
    const off = () => {
      s.off('data', onData);
      s.off('error', onError);
      s.off('end', onEnd);
    };
    s.on('data', onData);
    s.on('error', onError);
    s.on('end', onEnd);
  });
}

async function ttfb(n) {
  const samples = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    const s = await open();
    s.write(`GET /small HTTP/1.1\r\nHost: ${target}\r\nConnection: close\r\n\r\n`);
    let t1 = 0n;
    await readAnswer(s, () => { t1 = process.hrtime.bigint(); });
    samples.push(Number(t1 - t0) / 1000);
    s.destroy();
  }
  return { samples };
}

async function download(bytes) {
  const s = await open();
  const t0 = process.hrtime.bigint();
  s.write(`GET /big/${bytes} HTTP/1.1\r\nHost: ${target}\r\nConnection: close\r\n\r\n`);
  let got = 0;
  await new Promise((resolve, reject) => {
    s.on('data', (d) => { got += d.length; });
    s.on('end', resolve);
    s.on('error', reject);
  });
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  if (got < bytes) throw new Error(`got ${got} of ${bytes} bytes`);
  return { mib_per_s: bytes / 2 ** 20 / secs };
}

async function inject(conns, ms, caFile, auth, name) {
  const ca = caFile === '-' ? undefined : fs.readFileSync(caFile);
  const deadline = Date.now() + ms;
  let done = 0;
  let bad = 0;
  const t0 = Date.now();
  await Promise.all(Array.from({ length: conns }, async () => {
    const raw = await open();
    const s = tls.connect({ socket: raw, servername: name, ca, ALPNProtocols: ['http/1.1'] });
    await new Promise((resolve, reject) => { s.once('secureConnect', resolve); s.once('error', reject); });
    const req = `GET /echo HTTP/1.1\r\nHost: ${name}:${targetPort}\r\nAuthorization: ${auth}\r\n\r\n`;
    while (Date.now() < deadline) {
      s.write(req);
      const status = await readAnswer(s);
      if (status === 200) done++;
      else bad++;
    }
    s.destroy();
  }));
  return { rps: done / ((Date.now() - t0) / 1000), bad };
}

(async () => {
  let out;
  if (mode === 'ttfb') out = await ttfb(Number(rest[0]));
  else if (mode === 'download') out = await download(Number(rest[0]));
  else if (mode === 'inject') {
    out = await inject(Number(rest[0]), Number(rest[1]), rest[2], rest[3], rest[4]);
  }
  else throw new Error(`unknown mode ${mode}`);
  process.stdout.write(`${JSON.stringify(out)}\n`);
})().catch((err) => {
  process.stderr.write(`${err.stack || err}\n`);
  process.exit(1);
});
