// The docs' code runs as a reader would run it. A fenced block with `<!-- runnable -->` on the
// line before it (GitHub shows nothing of the comment) runs against a real cabind, in the order
// of its document, in a fresh project directory per document (a package.json and nothing else):
//   sh     run with `sh -e`
//   js     saved as a .mjs file and run with node
//   ts     saved as a .mts file, compiled with the repository's TypeScript with the options
//          docs/sdks.md names, and run
//   python saved as a .py file and run with the project's .venv/bin/python (an earlier block
//          makes it)
// `expect="TEXT"` in the comment: the block's stdout must hold TEXT. `file=NAME` names the file.
// The blocks see what a reader's shell would have: CABIN_URL and CABIN_API_KEY, CABIN_SRC (the
// directory Cabin was cloned into: here a copy of sdk/ beside node_modules, as `npm ci` leaves
// it), and Debian's python3 first on PATH. No registry is asked (npm offline, pip without an
// index): the installs must work from the checkout and apt's packages alone; the packages a
// reader would get from npm (playwright-core, @modelcontextprotocol/sdk) are the repository's,
// found from the directory above the projects.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BIN_DIR, startCabind } from './helpers.mjs';

const ROOT = process.cwd();
const DOCS = ['README.md', 'docs/sdks.md', 'docs/cli.md', 'docs/mcp.md'];
// What docs/sdks.md says `await using` needs on Node 20.
const TSC_OPTIONS = ['--strict', '--target', 'ES2022', '--module', 'NodeNext', '--moduleResolution',
  'NodeNext', '--lib', 'ES2022,ESNext.Disposable', '--types', 'node', '--skipLibCheck'];

// The marked blocks of a Markdown file: {lang, code, line, attrs}. A marker that is not right
// before a fence is an error, so a typo cannot drop a block silently.
function runnableBlocks(file) {
  const lines = fs.readFileSync(path.join(ROOT, file), 'utf8').split('\n');
  const blocks = [];
  for (let i = 0; i < lines.length; i++) {
    const m = /^<!--\s*runnable\b(.*?)-->\s*$/.exec(lines[i]);
    if (!m) continue;
    const fence = /^```(\w+)\s*$/.exec(lines[i + 1] ?? '');
    if (!fence) throw new Error(`${file}:${i + 1}: <!-- runnable --> is not followed by a fence`);
    const attrs = {};
    for (const a of m[1].matchAll(/(\w+)=(?:"([^"]*)"|(\S+))/g)) attrs[a[1]] = a[2] ?? a[3];
    const end = lines.indexOf('```', i + 2);
    if (end < 0) throw new Error(`${file}:${i + 2}: the fence is not closed`);
    blocks.push({ lang: fence[1], code: lines.slice(i + 2, end).join('\n') + '\n', line: i + 2,
                  attrs });
    i = end;
  }
  return blocks;
}

function run(cmd, args, { cwd, env, timeoutMs = 240000 }) {
  return new Promise((resolve) => {
    execFile(cmd, args, { cwd, env, timeout: timeoutMs, maxBuffer: 16 << 20 },
      (err, stdout, stderr) => resolve({ code: err ? (err.code ?? err.signal ?? 1) : 0,
                                         stdout, stderr }));
  });
}

let server, work, env;

before(async () => {
  server = await startCabind();
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-docs-'));
  // A checkout as scripts/setup leaves it, for what the docs install from: sdk/ without what
  // builds and tests leave in it, and the root's node_modules.
  const skip = new Set(['node_modules', 'dist', 'dist-test', 'build', '__pycache__', '.venv']);
  fs.cpSync(path.join(ROOT, 'sdk'), path.join(work, 'cabin', 'sdk'), {
    recursive: true,
    filter: (src) => !skip.has(path.basename(src)) && !src.endsWith('.egg-info'),
  });
  fs.symlinkSync(fs.realpathSync(path.join(ROOT, 'node_modules')),
                 path.join(work, 'node_modules'));
  fs.symlinkSync(path.join(work, 'node_modules'), path.join(work, 'cabin', 'node_modules'));
  // The docs' python3 is Debian's, whose packages the venv sees (this one first on PATH).
  const bin = path.join(work, 'bin');
  fs.mkdirSync(bin);
  fs.symlinkSync('/usr/bin/python3', path.join(bin, 'python3'));
  env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(PIP_|npm_config_)/i.test(k)));
  Object.assign(env, {
    PATH: `${bin}:${process.env.PATH}`,
    CABIN_URL: server.base,
    CABIN_API_KEY: server.key,
    CABIN_SRC: path.join(work, 'cabin'),
    PIP_NO_INDEX: '1',
    PIP_DISABLE_PIP_VERSION_CHECK: '1',
    npm_config_offline: 'true',
    npm_config_audit: 'false',
    npm_config_fund: 'false',
    npm_config_update_notifier: 'false',
  });
});

after(async () => {
  await server?.stop();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

async function liveSessions() {
  const r = await server.api('GET', '/v1/sessions');
  return r.json.sessions.map((s) => s.id);
}

async function runBlock(doc, block, n, project) {
  const where = `${doc}:${block.line} (${block.lang})`;
  const file = (ext) => path.join(project, block.attrs.file ?? `block-${n}.${ext}`);
  let r;
  switch (block.lang) {
    case 'sh':
      r = await run('sh', ['-e', '-c', block.code], { cwd: project, env });
      break;
    case 'js':
      fs.writeFileSync(file('mjs'), block.code);
      r = await run(process.execPath, [file('mjs')], { cwd: project, env });
      break;
    case 'ts': {
      fs.writeFileSync(file('mts'), block.code);
      const tsc = await run(process.execPath, [path.join(ROOT, 'node_modules/typescript/bin/tsc'),
        ...TSC_OPTIONS, file('mts')], { cwd: project, env });
      assert.equal(tsc.code, 0, `${where} does not compile:\n${tsc.stdout}${tsc.stderr}`);
      r = await run(process.execPath, [file('mts').replace(/\.mts$/, '.mjs')],
                    { cwd: project, env });
      break;
    }
    case 'python':
      fs.writeFileSync(file('py'), block.code);
      r = await run(path.join(project, '.venv/bin/python'), [file('py')], { cwd: project, env });
      break;
    default:
      throw new Error(`${where}: no way to run ${block.lang}`);
  }
  const said = `\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}\n--- cabind\n${server.logTail(20)}`;
  assert.equal(r.code, 0, `${where} failed (${r.code})${said}`);
  if (block.attrs.expect !== undefined) {
    assert.ok(r.stdout.includes(block.attrs.expect),
              `${where} printed no ${JSON.stringify(block.attrs.expect)}${said}`);
  }
}

describe('the docs run as written', () => {
  for (const doc of DOCS) {
    test(doc, async (t) => {
      const blocks = runnableBlocks(doc);
      assert.ok(blocks.length > 0, `${doc} has no runnable block`);
      const project = path.join(work, path.basename(doc, '.md').toLowerCase());
      fs.mkdirSync(project);
      fs.writeFileSync(path.join(project, 'package.json'),
                       JSON.stringify({ name: `docs-${path.basename(project)}`, private: true }));
      for (const [n, block] of blocks.entries()) {
        // A shell block may leave a session (a curl create); a program must delete its own.
        for (const id of await liveSessions()) await server.api('DELETE', `/v1/sessions/${id}`);
        const start = Date.now();
        await runBlock(doc, block, n, project);
        t.diagnostic(`${doc}:${block.line} (${block.lang}): ${Date.now() - start} ms`);
        if (block.lang !== 'sh') {
          assert.deepEqual(await liveSessions(), [],
                           `${doc}:${block.line} left its session behind`);
        }
      }
    });
  }
});

describe('the docs name what exists', () => {
  test('docs/operations.md lists every variable cabind --help names, and no other', async () => {
    const help = await run(path.join(BIN_DIR, 'cabind'), ['--help'], { env: process.env });
    assert.equal(help.code, 0, help.stderr);
    const fromHelp = new Set([...help.stdout.matchAll(/\(Env:(CABIN_[A-Z0-9_]+)\)/g)]
      .map((m) => m[1]));
    fromHelp.add('CABIN_API_KEY'); // read by cabind itself, not an option
    const ops = fs.readFileSync(path.join(ROOT, 'docs/operations.md'), 'utf8');
    const section = ops.slice(ops.indexOf('## Environment'));
    const table = new Set([...section.slice(0, section.indexOf('\n\n', section.indexOf('|---')))
      .matchAll(/^\| `(CABIN_[A-Z0-9_]+)` \|/gm)].map((m) => m[1]));
    assert.deepEqual([...table].sort(), [...fromHelp].sort());
  });

  test('README lists every document in docs/', () => {
    const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const listed = readme.slice(readme.indexOf('## Documents'));
    for (const f of fs.readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md'))) {
      assert.ok(listed.includes(`docs/${f}`), `README's Documents does not name docs/${f}`);
    }
  });
});
