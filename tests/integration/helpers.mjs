// Shared harness for the integration tests and the benchmarks: starts a real cabind, talks to its
// HTTP API, speaks raw CDP over WebSocket, and finds what a session left behind on the host.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import zlib from 'node:zlib';
import { after, before } from 'node:test';
import WebSocket from 'ws';
import { checkAnswer } from './openapi.mjs';

export const BIN_DIR = path.resolve(process.env.CABIN_BIN_DIR || 'build/bin');
export const SESSION_ID_RE = /^ses_[a-z0-9]{20}$/;

// ---------------------------------------------------------------------------------------------
// Waiting on conditions

// Resolves with the first truthy value `fn` returns, checking every `intervalMs` until
// `timeoutMs` has passed; then rejects, naming `what` and the last value or error seen.
export async function waitFor(fn, { timeoutMs = 10000, intervalMs = 50, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = v;
    } catch (err) {
      last = err;
    }
    if (Date.now() >= deadline) {
      const detail = last instanceof Error ? last.message : JSON.stringify(last);
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${detail})`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

// Races a promise against a deadline.
export function withDeadline(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// ---------------------------------------------------------------------------------------------
// cabind

// Starts build/bin/cabind on a free loopback port with fresh state and run directories.
// Resolves once it prints its "listening on" line. The returned object has `base` (http or https URL),
// `port`, `key`, `runDir`, `stateDir`, `api()`, `createSession()`, `deleteSession()`,
// `stop()` and `logTail()`.
// Pass `stateDir`, `runDir` and `key` of an earlier server to restart on its state.
// `wrap`: a command that execs cabind after it (e.g. ['prlimit', '--nofile=64:64', '--']), so
// the pid is still cabind's.
// `listen`: HOST:PORT on loopback (127.0.0.0/8), port 0 for any.
export async function startCabind({
  args = [], env = {}, startTimeoutMs = 15000, stateDir, runDir, key, wrap = [],
  listen = '127.0.0.1:0',
} = {}) {
  key ??= randomBytes(16).toString('hex'); // 32 characters
  stateDir ??= await fsp.mkdtemp(path.join(os.tmpdir(), 'cabin-state-'));
  // Short: UNIX socket paths under it are limited to 108 bytes.
  runDir ??= await fsp.mkdtemp('/tmp/cbr-');
  const bin = path.join(BIN_DIR, 'cabind');
  if (!fs.existsSync(bin)) {
    await removeTree(stateDir);
    await removeTree(runDir);
    throw new Error(`${bin} does not exist: build it first, or set CABIN_BIN_DIR`);
  }
  // Tests end their sessions at SIGTERM unless they test leaving them to the next cabind.
  const shutdown = args.includes('--on-shutdown') ? [] : ['--on-shutdown', 'delete'];
  const argv = ['--listen', listen, '--state-dir', stateDir, '--run-dir', runDir,
                ...shutdown, ...args];
  const child = spawn(
    wrap.length ? wrap[0] : bin,
    wrap.length ? [...wrap.slice(1), bin, ...argv] : argv,
    {
      env: { ...process.env, CABIN_API_KEY: key, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const logLines = [];
  let logCount = 0;
  const verbose = !!process.env.CABIN_TEST_VERBOSE;
  const remember = (stream) => (line) => {
    logLines.push(line);
    logCount += 1;
    if (logLines.length > 400) logLines.shift();
    if (verbose) process.stderr.write(`[cabind ${stream}] ${line}\n`);
  };
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal }));
    // A failed spawn (no such binary) emits 'error' and no 'exit'.
    child.on('error', (err) => {
      remember('spawn')(String(err));
      resolve({ code: null, signal: null, error: err });
    });
  });
  readline.createInterface({ input: child.stderr }).on('line', remember('err'));
  const out = readline.createInterface({ input: child.stdout });
  out.on('line', remember('out'));

  const listening = new Promise((resolve, reject) => {
    out.on('line', (line) => {
      const m = /^cabind \S+ listening on (https?:\/\/(127\.\d+\.\d+\.\d+):(\d+))$/.exec(line);
      if (m) resolve({ base: m[1], host: m[2], port: Number(m[3]) });
    });
    exited.then(({ code, signal }) =>
      reject(new Error(`cabind exited (code ${code}, signal ${signal}) before listening:\n` +
                       logLines.join('\n'))));
  });
  let base, host, port;
  try {
    ({ base, host, port } = await withDeadline(listening, startTimeoutMs, `${bin} to listen`));
  } catch (err) {
    child.kill('SIGKILL');
    await exited;
    await removeServerDirs({ stateDir, runDir });
    throw err;
  }

  const server = {
    base,
    port,
    hostPort: `${host}:${port}`,
    key,
    stateDir,
    runDir,
    pid: child.pid,
    exited,
    logTail: (n = 60) => logLines.slice(-n).join('\n'),
    // logMark() now, logSince(mark) later: the lines logged in between (of the last 400).
    logMark: () => logCount,
    logSince: (mark) => logLines.slice(-Math.min(logCount - mark, logLines.length)),
    api: (method, p, body, opts) => api(base, key, method, p, body, opts),
    createSession: async (spec = {}, opts = {}) => {
      const r = await api(base, key, 'POST', '/v1/sessions', spec, opts);
      if (r.status !== 201) {
        throw new Error(`POST /v1/sessions ${JSON.stringify(spec)} -> ${r.status} ${r.text}\n` +
                        server.logTail(30));
      }
      return r.json;
    },
    deleteSession: async (id) => {
      const r = await api(base, key, 'DELETE', `/v1/sessions/${id}`);
      if (r.status !== 200) throw new Error(`DELETE ${id} -> ${r.status} ${r.text}`);
      return r.json;
    },
    // SIGTERM, then wait for the exit; SIGKILL after the deadline. Resolves with {code, signal}
    // (and killed: true when it had to be killed). Removes the state and run directories
    // unless `keep`.
    stop: async ({ timeoutMs = 20000, keep = false } = {}) => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      let result;
      try {
        result = await withDeadline(exited, timeoutMs, 'cabind to exit after SIGTERM');
      } catch {
        child.kill('SIGKILL');
        result = { ...(await exited), killed: true };
      }
      if (!keep) await removeServerDirs({ stateDir, runDir });
      return result;
    },
    // SIGKILL, as a crash would; keeps the directories for a restart.
    crash: async () => {
      child.kill('SIGKILL');
      return exited;
    },
  };
  return server;
}

// Registers before/after hooks in the calling test file: one cabind for the whole file.
// The returned object is filled in by `before`; after the file, cabind gets SIGTERM and must
// exit 0 within the deadline, and no session it created may leave anything behind.
export function useCabind(options = {}) {
  const ctx = { server: null, sessions: new Set() };
  before(async () => {
    // `args` may be a function, for flags known only once the file's own before() has run.
    const args = typeof options.args === 'function' ? options.args() : options.args;
    ctx.server = await startCabind({ ...options, args });
    const origCreate = ctx.server.createSession;
    ctx.server.createSession = async (...a) => {
      const s = await origCreate(...a);
      ctx.sessions.add(s.id);
      return s;
    };
  });
  after(async () => {
    const server = ctx.server;
    if (!server) return;
    // Delete what a failed test may have left running, then stop the server.
    for (const id of ctx.sessions) {
      await server.api('DELETE', `/v1/sessions/${id}`).catch(() => {});
    }
    const runDir = server.runDir;
    const tail = server.logTail(40);
    const result = await server.stop();
    const problems = [];
    if (result.killed) problems.push('cabind did not exit within 20 s of SIGTERM');
    else if (result.code !== 0) {
      problems.push(`cabind exited with code ${result.code} signal ${result.signal}`);
    }
    for (const id of ctx.sessions) {
      const left = await waitForNoLeftovers(id, runDir, 10000).catch((e) => e.message);
      if (typeof left === 'string') problems.push(left);
    }
    if (problems.length) throw new Error(problems.join('\n') + '\ncabind log:\n' + tail);
  });
  return ctx;
}

export async function removeTree(dir) {
  await fsp.rm(dir, { recursive: true, force: true, maxRetries: 3 }).catch(() => {});
}

// A cabind's state and run directories, and the microvm driver's run dir beside the latter.
export async function removeServerDirs({ stateDir, runDir }) {
  await removeTree(stateDir);
  await removeTree(runDir);
  await removeTree(`${runDir}-vm`);
}

// ---------------------------------------------------------------------------------------------
// HTTP

// One request to cabind. `body`: an object (sent as JSON), a string or Buffer (sent as is), or
// undefined. opts.key: the API key to send (null: none); opts.headers: extra headers;
// opts.unchecked: the answer is not held to docs/openapi.json.
// Resolves with {status, headers, text, json}; json is null when the body is not JSON.
export async function api(base, defaultKey, method, p, body, opts = {}) {
  const headers = { ...(opts.headers || {}) };
  const key = opts.key === undefined ? defaultKey : opts.key;
  if (key !== null) headers.authorization = `Bearer ${key}`;
  let payload;
  if (body !== undefined) {
    payload = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
    headers['content-type'] ??= 'application/json';
  }
  const res = await fetch(base + p, { method, headers, body: payload, redirect: 'manual' })
    .catch((err) => {
      // undici hides why in `cause` (a reset, a closed keep-alive connection...).
      throw new Error(`${method} ${redact(p)}: ${err.message}: ${err.cause?.code ?? ''} ${err.cause?.message ?? ''}`);
    });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON; callers that care assert on `json`
  }
  // Every answer is held to the API's contract, unless a test sends what no client would.
  if (!opts.unchecked) {
    checkAnswer(method, new URL(base + p).pathname, res.status, res.headers.get('content-type'),
                text);
  }
  return { status: res.status, headers: res.headers, text, json };
}

// Reads Server-Sent Events from `url`: {events (parsed data with their ids), close()}.
export async function openSse(url, headers = {}) {
  const ac = new AbortController();
  const res = await fetch(url, { headers, signal: ac.signal });
  assert.equal(res.status, 200, await (res.status === 200 ? '' : res.text()));
  assert.match(res.headers.get('content-type'), /^text\/event-stream/);
  const out = { events: [], ended: false, close: () => ac.abort() };
  (async () => {
    let buf = '';
    const dec = new TextDecoder();
    try {
      for await (const chunk of res.body) {
        buf += dec.decode(chunk, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let id = null;
          let data = null;
          for (const line of block.split('\n')) {
            if (line.startsWith('id: ')) id = Number(line.slice(4));
            if (line.startsWith('data: ')) data = JSON.parse(line.slice(6));
          }
          if (data) out.events.push({ id, ...data });
        }
      }
    } catch {
      // aborted
    }
    out.ended = true;
  })();
  return out;
}

// Sends `head` (and then `body`) on a plain TCP connection and parses the first HTTP response.
// For requests that fetch would normalise or refuse to send (dot segments, huge targets).
// Resolves with {status, headers, text, json, raw}; rejects when no response comes at all.
// halfClose: shut the connection's sending side once the body is sent.
export function rawHttp(port, head, body = null, { timeoutMs = 10000, halfClose = false } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    const chunks = [];
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      const raw = Buffer.concat(chunks).toString('latin1');
      const parsed = parseHttpResponse(raw);
      if (!parsed) {
        reject(new Error(`no HTTP response (got ${JSON.stringify(raw.slice(0, 200))}` +
                         `${sockError ? `, socket error ${sockError}` : ''})`));
      } else {
        resolve(parsed);
      }
    };
    const timer = setTimeout(finish, timeoutMs);
    sock.on('data', (d) => {
      chunks.push(d);
      const parsed = parseHttpResponse(Buffer.concat(chunks).toString('latin1'));
      if (parsed && parsed.complete) finish();
    });
    sock.on('end', finish);
    sock.on('close', finish);
    // The server may answer and close before it has read everything; that is fine.
    let sockError = null;
    sock.on('error', (err) => {
      sockError = err.code || err.message;
    });
    sock.on('connect', async () => {
      sock.write(head);
      // The body goes in pieces, as real clients send it, and stops once an answer arrives: a
      // write into a socket the server has closed would make node drop the unread answer.
      for (let off = 0; body && off < body.length && !chunks.length && !sock.destroyed;) {
        const piece = body.subarray(off, off + (64 << 10));
        off += piece.length;
        if (!sock.write(piece)) {
          await new Promise((r) => {
            sock.once('drain', r);
            sock.once('data', r);
            sock.once('close', r);
          });
        }
      }
      // A client that sent all it will: the server sees the body end.
      if (halfClose && !sock.destroyed) sock.end();
    });
  });
}

function parseHttpResponse(raw) {
  const end = raw.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const lines = raw.slice(0, end).split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0]);
  if (!m) return null;
  const headers = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(':');
    if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  let text = raw.slice(end + 4);
  let complete = false;
  if (headers['content-length'] !== undefined) {
    const n = Number(headers['content-length']);
    complete = Buffer.byteLength(text, 'latin1') >= n;
    text = text.slice(0, n);
  } else if (/chunked/i.test(headers['transfer-encoding'] || '')) {
    const dechunked = dechunk(text);
    complete = dechunked !== null;
    if (dechunked !== null) text = dechunked;
  }
  let json = null;
  try {
    json = JSON.parse(Buffer.from(text, 'latin1').toString('utf8'));
  } catch {
    // not JSON
  }
  return { status: Number(m[1]), headers, text, json, complete, raw };
}

function dechunk(s) {
  let out = '';
  for (;;) {
    const nl = s.indexOf('\r\n');
    if (nl < 0) return null;
    const size = parseInt(s.slice(0, nl), 16);
    if (Number.isNaN(size)) return null;
    if (size === 0) return out;
    if (s.length < nl + 2 + size + 2) return null;
    out += s.slice(nl + 2, nl + 2 + size);
    s = s.slice(nl + 2 + size + 2);
  }
}

// ---------------------------------------------------------------------------------------------
// WebSocket and raw CDP

// Opens a WebSocket. Resolves with the open socket; rejects with an Error carrying `status`,
// `body` and `json` when the server answers the upgrade with an HTTP response instead.
// `onMessage` is attached before the socket opens: a message sent right behind the server's
// 101 is delivered before a listener attached after the promise resolves could see it.
// `ca`: certificates to trust for wss:// (a self-signed cabind).
export function wsOpen(url, {
  headers = {}, timeoutMs = 10000, maxPayload = 256 << 20, onMessage, ca,
} = {}) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers, maxPayload, perMessageDeflate: false, ...(ca ? { ca } : {}) });
    if (onMessage) ws.on('message', onMessage);
    const timer = setTimeout(() => {
      ws.terminate();
      reject(new Error(`WebSocket ${redact(url)}: no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    ws.once('open', () => {
      clearTimeout(timer);
      resolve(ws);
    });
    ws.once('unexpected-response', (req, res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => {
        clearTimeout(timer);
        const body = Buffer.concat(chunks).toString('utf8');
        const err = new Error(`WebSocket ${redact(url)}: HTTP ${res.statusCode} ${body}`);
        err.status = res.statusCode;
        err.body = body;
        try {
          err.json = JSON.parse(body);
        } catch {
          err.json = null;
        }
        req.destroy();
        reject(err);
      });
    });
    ws.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

export function redact(url) {
  return String(url).replace(/token=[^&]*/, 'token=…');
}

// A minimal CDP client over one WebSocket: `send(method, params, sessionId)` resolves with the
// result or rejects with the protocol error; `on(event, fn)` listens to events.
export class Cdp {
  constructor(ws) {
    this.ws = ws;
    this.nextId = 1;
    this.pending = new Map();
    this.listeners = new Map();
    this.closed = new Promise((resolve) => ws.once('close', (code) => resolve(code)));
    ws.on('message', (data) => {
      const msg = JSON.parse(data.toString('utf8'));
      if (msg.id !== undefined) {
        const p = this.pending.get(msg.id);
        if (!p) return;
        this.pending.delete(msg.id);
        if (msg.error) p.reject(Object.assign(new Error(msg.error.message), { cdp: msg.error }));
        else p.resolve(msg.result);
      } else if (msg.method) {
        for (const fn of this.listeners.get(msg.method) || []) fn(msg.params, msg.sessionId);
      }
    });
    ws.on('close', () => {
      for (const p of this.pending.values()) p.reject(new Error('CDP connection closed'));
      this.pending.clear();
    });
  }

  static async connect(url, opts) {
    return new Cdp(await wsOpen(url, opts));
  }

  send(method, params = {}, sessionId = undefined) {
    const id = this.nextId++;
    const msg = { id, method, params };
    if (sessionId) msg.sessionId = sessionId;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify(msg), (err) => {
        if (err) {
          this.pending.delete(id);
          reject(err);
        }
      });
    });
  }

  on(method, fn) {
    if (!this.listeners.has(method)) this.listeners.set(method, []);
    this.listeners.get(method).push(fn);
  }

  waitEvent(method, { timeoutMs = 10000, filter = () => true } = {}) {
    return withDeadline(
      new Promise((resolve) => {
        const fn = (params, sessionId) => {
          if (filter(params, sessionId)) resolve({ params, sessionId });
        };
        this.on(method, fn);
      }),
      timeoutMs,
      `CDP event ${method}`,
    );
  }

  close() {
    this.ws.close();
    return this.closed;
  }
}

// ---------------------------------------------------------------------------------------------
// What a session leaves behind

function readText(p) {
  try {
    return fs.readFileSync(p, 'utf8');
  } catch {
    return null;
  }
}

// Directories under `dir` (to `depth` levels) whose name contains `needle` (a string), or for
// which `needle(name)` holds; below a match it does not look.
export function findDirs(dir, needle, depth, out = []) {
  let entries;
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return;
  }
  for (const e of entries) {
    if (!e.isDirectory() || e.isSymbolicLink()) continue;
    const p = path.join(dir, e.name);
    if (typeof needle === 'function' ? needle(e.name) : e.name.includes(needle)) out.push(p);
    else if (depth > 1) findDirs(p, needle, depth - 1, out);
  }
  return out;
}

// A cgroup standing for a container's, as a container runtime makes one: join(pid) puts a
// process in it (its children are born there), and stop() kills every process in it, as the
// runtime does when it stops the container (runc kills the cgroup whole), then removes it.
// v2: a dir of the unified hierarchy; v1: one of the pids controller's.
export function containerCgroup() {
  const v2 = fs.existsSync('/sys/fs/cgroup/cgroup.controllers');
  const dir = path.join(v2 ? '/sys/fs/cgroup' : '/sys/fs/cgroup/pids',
                        `cabin-test-container-${randomBytes(4).toString('hex')}`);
  fs.mkdirSync(dir);
  const pids = () => {
    try {
      return fs.readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)
        .map(Number);
    } catch (err) {
      if (err.code === 'ENOENT') return [];  // stopped already
      throw err;
    }
  };
  return {
    dir,
    pids,
    join: (pid) => fs.writeFileSync(path.join(dir, 'cgroup.procs'), String(pid)),
    stop: async () => {
      await waitFor(() => {
        const left = pids();
        for (const pid of left) {
          try { process.kill(pid, 'SIGKILL'); } catch { /* gone meanwhile */ }
        }
        return left.length === 0;
      }, { timeoutMs: 10000, intervalMs: 50, what: `every process of ${dir} to die` });
      await waitFor(() => {
        try {
          fs.rmdirSync(dir);
          return true;
        } catch (err) {
          if (err.code === 'ENOENT') return true;
          if (err.code === 'EBUSY') return false;
          throw err;
        }
      }, { timeoutMs: 10000, intervalMs: 50, what: `${dir} to be removed` });
    },
  };
}

// Everything on this host that still carries the session id: processes (by command line or
// cgroup), cgroup directories (v1 controllers and the v2 hierarchy), entries in the run dir,
// and mounts. Returns a list of human-readable strings; empty means nothing was left.
export function leftovers(sessionId, runDir) {
  const found = [];
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    const cmdline = readText(`/proc/${pid}/cmdline`);
    if (cmdline === null) continue; // gone meanwhile
    const cgroup = readText(`/proc/${pid}/cgroup`) || '';
    const stat = readText(`/proc/${pid}/stat`) || '';
    const state = /\) (\S)/.exec(stat)?.[1] ?? '?';
    if (cmdline.includes(sessionId)) {
      found.push(`process ${pid} [${state}]: ${cmdline.split('\0').join(' ').trim()}`);
    } else if (cgroup.includes(sessionId)) {
      found.push(`process ${pid} [${state}] in cgroup ${cgroup.trim().split('\n').join(' ')}`);
    }
  }
  const cgroupDirs = [];
  findDirs('/sys/fs/cgroup', sessionId, 6, cgroupDirs);
  for (const d of cgroupDirs) found.push(`cgroup ${d}`);
  if (runDir) {
    let entries = [];
    try {
      entries = fs.readdirSync(runDir);
    } catch {
      // run dir gone: nothing in it
    }
    for (const e of entries) {
      if (e.includes(sessionId)) found.push(`run dir entry ${path.join(runDir, e)}`);
    }
  }
  const mountinfo = readText('/proc/self/mountinfo') || '';
  for (const line of mountinfo.split('\n')) {
    if (line.includes(sessionId)) found.push(`mount ${line}`);
  }
  return found;
}

// The pids of the processes that carry the session id in their command line or cgroup: a
// namespace sandbox's launcher, PID 1 and everything under it; a microVM's QEMU.
export function sessionPids(sessionId) {
  const pids = [];
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    const cmdline = readText(`/proc/${pid}/cmdline`) || '';
    const cgroup = readText(`/proc/${pid}/cgroup`) || '';
    if (cmdline.includes(sessionId) || cgroup.includes(sessionId)) pids.push(Number(pid));
  }
  return pids;
}

// The session's one process whose comm is `comm` (for chromium, the browser: the process without
// --type), seen from the host.
export function sessionProcess(sessionId, comm) {
  const found = sessionPids(sessionId).filter((pid) => {
    if ((readText(`/proc/${pid}/comm`) || '').trim() !== comm) return false;
    return comm !== 'chromium' || !(readText(`/proc/${pid}/cmdline`) || '').includes('--type=');
  });
  assert.equal(found.length, 1, `one ${comm} in ${sessionId}: ${found}`);
  return found[0];
}

// A field of /proc/PID/status on the host ("Seccomp_filters", "CapEff", "NSpid"...); undefined
// when the process is gone.
export function procStatus(pid, field) {
  const line = (readText(`/proc/${pid}/status`) || '').split('\n')
    .find((l) => l.startsWith(`${field}:`));
  return line?.slice(field.length + 1).trim();
}

// fd number -> what it refers to (`socket:[123]`, `pipe:[45]`, a path) for one process; empty
// when it is gone.
// The pid of the QEMU of a microVM session: it runs in its session's directory.
export function qemuPidOf(sessionId) {
  let out = '';
  try {
    out = execFileSync('pgrep', ['-f', 'qemu-system'], { encoding: 'utf8' });
  } catch {
    return undefined;  // pgrep exits 1 when nothing matches
  }
  return out.split('\n').filter(Boolean).find((pid) => {
    try {
      return fs.readlinkSync(`/proc/${pid}/cwd`).includes(sessionId) &&
        fs.readlinkSync(`/proc/${pid}/exe`).includes('qemu-system');
    } catch {
      return false;  // exited meanwhile
    }
  });
}

export function openDescriptors(pid) {
  const fds = new Map();
  let names = [];
  try {
    names = fs.readdirSync(`/proc/${pid}/fd`);
  } catch {
    return fds;
  }
  for (const fd of names) {
    try {
      fds.set(Number(fd), fs.readlinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {
      // closed meanwhile
    }
  }
  return fds;
}

// Polls leftovers() until it is empty; rejects with the list when the deadline passes.
export async function waitForNoLeftovers(sessionId, runDir, timeoutMs = 10000) {
  let last = [];
  try {
    await waitFor(
      () => {
        last = leftovers(sessionId, runDir);
        return last.length === 0;
      },
      { timeoutMs, intervalMs: 100, what: `session ${sessionId} to leave nothing behind` },
    );
  } catch {
    throw new Error(`session ${sessionId} left behind:\n  ${last.join('\n  ')}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Misc

// A TCP port that was free a moment ago.
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// Width and height from a PNG's IHDR chunk.
export function pngSize(buf) {
  const sig = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  if (buf.length < 24 || !buf.subarray(0, 8).equals(sig)) throw new Error('not a PNG');
  if (buf.toString('latin1', 12, 16) !== 'IHDR') throw new Error('PNG without IHDR first');
  return { width: buf.readUInt32BE(16), height: buf.readUInt32BE(20) };
}

// Decodes an 8-bit RGB or RGBA PNG (what cabin-agent writes; no palettes, no interlace):
// {width, height, channels, data} with rows packed, `channels` bytes per pixel.
export function pngDecode(buf) {
  const { width, height } = pngSize(buf);
  const depth = buf[24];
  const type = buf[25];
  const channels = { 2: 3, 6: 4 }[type];
  if (depth !== 8 || !channels || buf[28] !== 0) throw new Error('unsupported PNG layout');
  const idat = [];
  for (let off = 8; off < buf.length;) {
    const len = buf.readUInt32BE(off);
    const kind = buf.toString('latin1', off + 4, off + 8);
    if (kind === 'IDAT') idat.push(buf.subarray(off + 8, off + 8 + len));
    off += 12 + len;
  }
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const data = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? data[y * stride + x - channels] : 0;
      const b = y > 0 ? data[(y - 1) * stride + x] : 0;
      const c = x >= channels && y > 0 ? data[(y - 1) * stride + x - channels] : 0;
      let pred = 0;
      if (filter === 1) pred = a;
      else if (filter === 2) pred = b;
      else if (filter === 3) pred = (a + b) >> 1;
      else if (filter === 4) {
        const p = a + b - c;
        const pa = Math.abs(p - a);
        const pb = Math.abs(p - b);
        const pc = Math.abs(p - c);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      } else if (filter !== 0) throw new Error(`PNG filter ${filter}`);
      data[y * stride + x] = (line[x] + pred) & 0xff;
    }
  }
  return { width, height, channels, data };
}

// The [r, g, b] of pixel (x, y) of a pngDecode() result.
export function pixelAt(img, x, y) {
  const i = (y * img.width + x) * img.channels;
  return [img.data[i], img.data[i + 1], img.data[i + 2]];
}

// Starts a 50 ms interval in a Playwright page that counts in window.ticks, and returns the count
// once it runs: how far the page's own timers got tells whether it was running meanwhile.
export async function startTicking(page) {
  await page.evaluate(() => {
    window.ticks = 0;
    setInterval(() => { window.ticks += 1; }, 50);
  });
  await page.waitForFunction(() => window.ticks > 2);
  return page.evaluate(() => window.ticks);
}
