// Xvfb + Chromium started directly on the host, the way cabin-agent starts them inside a sandbox,
// without any sandbox: the floor that cabind's numbers are measured against.
import { execFileSync, spawn } from 'node:child_process';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

import { Cdp, freePort, removeTree, withDeadline } from '../tests/integration/helpers.mjs';

export const CHROMIUM = process.env.CABIN_CHROMIUM || '/usr/bin/chromium';
export const XVFB = process.env.CABIN_XVFB || '/usr/bin/Xvfb';

export function chromiumVersion() {
  try {
    return execFileSync(CHROMIUM, ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return 'unknown';
  }
}

function groupAlive(pgid) {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

function signalGroup(child, sig) {
  try {
    process.kill(-child.pid, sig);
  } catch {
    // the group is gone
  }
}

// Stops a process started with `detached: true` and everything in its process group (Chromium's
// zygotes, renderers and crashpad handler): SIGTERM, wait until the group is empty, SIGKILL after
// the deadline. Waiting for the whole group matters: a helper still writing into the profile
// would race the removal of the profile directory.
async function killAndWait(child, timeoutMs = 5000) {
  if (!child) return;
  signalGroup(child, 'SIGTERM');
  const deadline = Date.now() + timeoutMs;
  while (groupAlive(child.pid) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 10));
  }
  if (groupAlive(child.pid)) {
    signalGroup(child, 'SIGKILL');
    while (groupAlive(child.pid)) await new Promise((r) => setTimeout(r, 10));
  }
  if (child.exitCode === null && child.signalCode === null) {
    await new Promise((resolve) => child.once('exit', resolve));
  }
}

// Starts Xvfb on a display it picks itself (-displayfd). Resolves with {display, stop()}.
export async function startXvfb(width, height) {
  const child = spawn(
    XVFB,
    ['-displayfd', '3', '-screen', '0', `${width}x${height}x24`, '-nolisten', 'tcp', '-noreset'],
    { stdio: ['ignore', 'ignore', 'pipe', 'pipe'], detached: true },
  );
  const display = await withDeadline(
    new Promise((resolve, reject) => {
      let buf = '';
      child.stdio[3].on('data', (d) => {
        buf += d.toString();
        const m = /^(\d+)\n/.exec(buf);
        if (m) resolve(`:${m[1]}`);
      });
      child.once('exit', (code) => reject(new Error(`Xvfb exited with ${code}`)));
    }),
    10000,
    'Xvfb to report its display',
  );
  return { display, stop: () => killAndWait(child) };
}

// Starts Chromium on `display` with DevTools on a free loopback port. Does not wait for it.
export async function spawnChromium(display, { width = 1280, height = 800, url = 'about:blank' } = {}) {
  const port = await freePort();
  const userDataDir = await fsp.mkdtemp(path.join(os.tmpdir(), 'cabin-bench-chromium-'));
  const args = [
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-default-browser-check',
    '--password-store=basic',
    '--remote-debugging-address=127.0.0.1',
    `--remote-debugging-port=${port}`,
    `--user-data-dir=${userDataDir}`,
    '--window-position=0,0',
    `--window-size=${width},${height}`,
  ];
  if (process.getuid && process.getuid() === 0) args.push('--no-sandbox');
  args.push(url);
  const child = spawn(CHROMIUM, args, {
    env: { ...process.env, DISPLAY: display },
    stdio: ['ignore', 'ignore', 'pipe'],
    detached: true,
  });
  const log = [];
  readline.createInterface({ input: child.stderr }).on('line', (l) => {
    log.push(l);
    if (log.length > 50) log.shift();
  });
  return {
    port,
    child,
    log,
    stop: async () => {
      await killAndWait(child);
      await removeTree(userDataDir);
    },
  };
}

// Polls http://127.0.0.1:port/json/version every `intervalMs` until it answers; resolves with it.
export async function waitDevtools(port, { timeoutMs = 30000, intervalMs = 5, child } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const res = await fetch(`http://127.0.0.1:${port}/json/version`);
      if (res.ok) return await res.json();
    } catch {
      // not listening yet
    }
    if (child && (child.exitCode !== null || child.signalCode !== null)) {
      throw new Error(`chromium exited (${child.exitCode ?? child.signalCode}) before DevTools answered`);
    }
    if (Date.now() >= deadline) throw new Error(`DevTools on port ${port} did not answer in ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

// Xvfb + Chromium, ready: resolves with {port, version, display, stop()}.
export async function startHostBrowser({ width = 1280, height = 800, url = 'about:blank' } = {}) {
  const xvfb = await startXvfb(width, height);
  let chromium;
  try {
    chromium = await spawnChromium(xvfb.display, { width, height, url });
    const version = await waitDevtools(chromium.port, { child: chromium.child });
    return {
      port: chromium.port,
      version,
      display: xvfb.display,
      stop: async () => {
        await chromium.stop();
        await xvfb.stop();
      },
    };
  } catch (err) {
    if (chromium) await chromium.stop();
    await xvfb.stop();
    throw err;
  }
}

// The first page target listed at a DevTools discovery URL (cabind's or Chromium's), on raw CDP.
export async function pageTarget(listUrl, opts) {
  const r = await fetch(listUrl, opts);
  if (!r.ok) throw new Error(`${listUrl} -> ${r.status}`);
  const page = (await r.json()).find((t) => t.type === 'page');
  if (!page) throw new Error(`no page target at ${listUrl}`);
  return Cdp.connect(page.webSocketDebuggerUrl, { maxPayload: 512 << 20 });
}
