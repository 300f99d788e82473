// Scale-out on one machine, for the tests and the benchmark: a name server that answers a
// headless Service's records as cluster DNS does, and cabin-gateway started from this build.
import { spawn } from 'node:child_process';
import dgram from 'node:dgram';
import { once } from 'node:events';
import path from 'node:path';
import readline from 'node:readline';

import { dnsAnswer, dnsQuestion } from './egress_world.mjs';
import { BIN_DIR, api, withDeadline } from './helpers.mjs';

export const SERVICE = 'cabind.cabin.svc.cluster.local';

// A name server for the headless Service: one A record per node (TTL 0), none for AAAA.
export async function startDns(addresses) {
  const socket = dgram.createSocket('udp4');
  socket.on('message', (msg, from) => {
    const q = dnsQuestion(msg);
    if (!q) return;
    const list = q.name === SERVICE && q.type === 1 ? addresses : [];
    socket.send(dnsAnswer(q, list), from.port, from.address);
  });
  socket.bind(0, '127.0.0.1');
  await once(socket, 'listening');
  return { port: socket.address().port, close: () => socket.close() };
}

// `dnsPort` and `nodePort`: discovery by DNS; else `nodes`, a list of HOST:PORT.
export async function startGateway(host, port, { dnsPort, nodePort, nodes = [], key, args = [] }) {
  const discovery = dnsPort
    ? ['--nodes-dns', SERVICE, '--node-port', String(nodePort), '--dns', `127.0.0.1:${dnsPort}`]
    : nodes.flatMap((n) => ['--node', n]);
  const child = spawn(path.join(BIN_DIR, 'cabin-gateway'), [
    '--listen', `${host}:${port}`, ...discovery, '--poll-interval-ms', '300',
    '--preview-domain', 'preview.test', ...args,
  ], { env: { ...process.env, CABIN_API_KEY: key }, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines = [];
  readline.createInterface({ input: child.stderr }).on('line', (l) => {
    lines.push(l);
    if (lines.length > 200) lines.shift();
  });
  const out = readline.createInterface({ input: child.stdout });
  const base = await withDeadline(new Promise((resolve, reject) => {
    out.on('line', (l) => {
      const m = /^cabin-gateway listening on (http:\/\/\S+)$/.exec(l);
      if (m) resolve(m[1]);
    });
    child.on('exit', (code) => reject(new Error(`cabin-gateway exited ${code}: ${lines.join('\n')}`)));
  }), 10000, 'cabin-gateway to listen');
  return {
    base, child, pid: child.pid, logTail: () => lines.slice(-30).join('\n'),
    api: (method, p, body, opts) => api(base, key, method, p, body, opts),
    stop: async () => {
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        await once(child, 'exit');
      }
    },
  };
}
