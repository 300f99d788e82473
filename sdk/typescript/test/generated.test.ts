// src/schema.d.ts is what openapi-typescript makes of docs/openapi.json today: a change to the
// API's contract that was not carried into the SDK's types fails here.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const sdk = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const root = path.resolve(sdk, '../..');

test('the SDK\'s types are generated from the current docs/openapi.json', () => {
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'cabin-sdk-')), 'schema.d.ts');
  try {
    const bin = path.join(root, 'node_modules/.bin/openapi-typescript');
    execFileSync(bin, [path.join(root, 'docs/openapi.json'), '-o', out], { stdio: 'pipe' });
    assert.ok(fs.readFileSync(out, 'utf8') === fs.readFileSync(path.join(sdk, 'src/schema.d.ts'), 'utf8'),
      'src/schema.d.ts is stale: run `npm run generate` in sdk/typescript');
  } finally {
    fs.rmSync(path.dirname(out), { recursive: true, force: true });
  }
});
