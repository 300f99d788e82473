#!/usr/bin/env node
// Builds the console and the live view into static files that cabind serves:
//   node web-ui/build.mjs [--out build/web-ui]
// Type-checks with tsc, bundles each page's script (noVNC included) and the stylesheet with
// esbuild, names every asset by its content hash (so cabind can let browsers cache them for
// good) and writes the HTML pages pointing at them. Everything comes from node_modules: the pages
// load nothing from anywhere but cabind.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import * as esbuild from 'esbuild';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');

let out = path.join(root, 'build', 'web-ui');
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--out' && args[i + 1]) out = path.resolve(args[++i]);
  else {
    console.error(`usage: node web-ui/build.mjs [--out DIR] (unknown argument ${args[i]})`);
    process.exit(2);
  }
}

const tsc = spawnSync(process.execPath,
                      [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'),
                       '-p', path.join(here, 'tsconfig.json')],
                      { stdio: 'inherit' });
if (tsc.status !== 0) {
  console.error('web-ui: type check failed');
  process.exit(1);
}

// Built beside the target, then swapped in, so cabind never sees half a build.
const tmp = `${out}.tmp-${process.pid}`;
fs.rmSync(tmp, { recursive: true, force: true });
const result = await esbuild.build({
  entryPoints: {
    console: path.join(here, 'src', 'console.ts'),
    live: path.join(here, 'src', 'live.ts'),
    style: path.join(here, 'src', 'style.css'),
  },
  outdir: tmp,
  entryNames: '[name]-[hash]',
  bundle: true,
  format: 'esm', // noVNC uses top-level await
  target: ['es2022', 'chrome100', 'firefox100', 'safari16'],
  minify: true,
  legalComments: 'eof', // noVNC is MPL-2.0: its notices stay in the bundle
  metafile: true,
  logLevel: 'warning',
});

const assets = {};
for (const [file, meta] of Object.entries(result.metafile.outputs)) {
  if (!meta.entryPoint) continue;
  const name = path.basename(file);
  const ext = path.extname(name);
  const entry = path.basename(meta.entryPoint, path.extname(meta.entryPoint));
  assets[`%${entry.toUpperCase()}_${ext.slice(1).toUpperCase()}%`] = `/ui/${name}`;
}

for (const page of ['index.html', 'live.html']) {
  let html = fs.readFileSync(path.join(here, 'pages', page), 'utf8');
  html = html.replace(/%[A-Z_]+%/g, (m) => {
    if (!assets[m]) throw new Error(`${page}: ${m} names no built asset`);
    return assets[m];
  });
  fs.writeFileSync(path.join(tmp, page), html);
}

const old = `${out}.old-${process.pid}`;
if (fs.existsSync(out)) fs.renameSync(out, old);
fs.renameSync(tmp, out);
fs.rmSync(old, { recursive: true, force: true });
const files = fs.readdirSync(out).sort();
console.log(`web-ui: built ${files.length} files into ${path.relative(process.cwd(), out) || '.'}: ` +
            files.join(' '));
