// Checks docs/openapi.json itself: it is a valid OpenAPI 3.1 document, and every schema in it
// compiles under JSON Schema 2020-12 (the dialect of OpenAPI 3.1).
import fs from 'node:fs';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { Validator } from '@seriousme/openapi-schema-validator';
import { SPEC_PATH } from './openapi.mjs';

const doc = JSON.parse(fs.readFileSync(SPEC_PATH, 'utf8'));
const result = await new Validator().validate(structuredClone(doc));
if (!result.valid) {
  console.error('docs/openapi.json is not a valid OpenAPI 3.1 document:');
  console.error(JSON.stringify(result.errors, null, 1));
  process.exit(1);
}

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addSchema(doc, 'openapi.json');
let schemas = 0;
const failures = [];
const visit = (node, at) => {
  if (!node || typeof node !== 'object') return;
  for (const [k, v] of Object.entries(node)) {
    const here = `${at}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`;
    if (k === 'schema' && v && typeof v === 'object') {
      try {
        ajv.compile({ $ref: `openapi.json#${here.split('/').map(encodeURIComponent).join('/')}` });
        schemas += 1;
      } catch (err) {
        failures.push(`${here}: ${err.message}`);
      }
    } else {
      visit(v, here);
    }
  }
};
visit(doc.paths, '/paths');
visit(doc.components, '/components');
for (const name of Object.keys(doc.components?.schemas ?? {})) {
  try {
    ajv.compile({ $ref: `openapi.json#/components/schemas/${encodeURIComponent(name)}` });
    schemas += 1;
  } catch (err) {
    failures.push(`/components/schemas/${name}: ${err.message}`);
  }
}
if (failures.length) {
  console.error(`schemas in docs/openapi.json that do not compile:\n${failures.join('\n')}`);
  process.exit(1);
}
const ops = Object.values(doc.paths).flatMap((item) =>
  Object.keys(item).filter((m) => ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'].includes(m)));
console.log(`docs/openapi.json: valid OpenAPI ${doc.openapi}, ${Object.keys(doc.paths).length} paths, ` +
            `${ops.length} operations, ${schemas} schemas compiled`);
