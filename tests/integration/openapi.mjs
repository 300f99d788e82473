// Holds cabind's answers to docs/openapi.json: every answer that helpers.mjs's api() receives is
// checked here, so a drift between the server and its contract fails the test that saw it.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const here = path.dirname(fileURLToPath(import.meta.url));
export const SPEC_PATH = path.resolve(here, '../../docs/openapi.json');

let loaded = null;

function load() {
  if (loaded) return loaded;
  const doc = JSON.parse(fs.readFileSync(SPEC_PATH, 'utf8'));
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  ajv.addSchema(doc, 'openapi.json');
  const routes = Object.entries(doc.paths).map(([tmpl, item]) => {
    const body = tmpl.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[a-z_]+\}/g, '[^/]+');
    // A prefix item covers everything below it; other paths take one trailing slash, as the
    // router does.
    const re = item['x-cabin-prefix'] ? new RegExp(`^${body}`) : new RegExp(`^${body}/?$`);
    return { tmpl, item, re };
  });
  loaded = { doc, ajv, routes, validators: new Map() };
  return loaded;
}

// A JSON pointer as a URI fragment: each part escaped, then percent-encoded.
const pointer = (...parts) => parts
  .map((p) => encodeURIComponent(String(p).replace(/~/g, '~0').replace(/\//g, '~1'))).join('/');

function resolve(doc, obj) {
  let o = obj;
  while (o && o.$ref) {
    o = o.$ref.replace(/^#\//, '').split('/')
      .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
      .reduce((a, k) => a[k], doc);
  }
  return o;
}

function validator(ref) {
  const { ajv, validators } = load();
  let v = validators.get(ref);
  if (!v) {
    v = ajv.compile({ $ref: ref });
    validators.set(ref, v);
  }
  return v;
}

// The operation an answer belongs to: { tmpl, op } or { tmpl, op: null } (path known, method
// not) or null (no such path).
export function findOperation(method, urlPath) {
  const { routes } = load();
  const m = method.toLowerCase();
  // Exact templates win over a prefix item.
  const hits = routes.filter((r) => r.re.test(urlPath))
    .sort((a, b) => Number(!!a.item['x-cabin-prefix']) - Number(!!b.item['x-cabin-prefix']));
  if (!hits.length) return null;
  const hit = hits.find((r) => r.item[m]) ?? hits[0];
  return { tmpl: hit.tmpl, op: hit.item[m] ?? null };
}

// The schema a validator reference names: "openapi.json#<percent-encoded JSON pointer>".
function schemaAt(doc, ref) {
  const parts = ref.slice(ref.indexOf('#') + 2).split('/')
    .map((s) => decodeURIComponent(s).replace(/~1/g, '/').replace(/~0/g, '~'));
  return resolve(doc, parts.reduce((a, k) => a?.[k], doc));
}

const isJson = (contentType) => /^application\/(.+\+)?json$/.test(contentType ?? '');

function checkBody(where, ref, contentType, text) {
  const { doc } = load();
  let value = text;
  if (isJson(contentType)) {
    try {
      value = JSON.parse(text);
    } catch {
      throw new Error(`${where}: ${contentType} body is not JSON: ${text.slice(0, 200)}`);
    }
  } else if (!schemaAt(doc, ref)?.type) {
    return;  // a binary or text body described only by its media type
  }
  const v = validator(ref);
  if (!v(value)) {
    const errs = v.errors.slice(0, 5)
      .map((e) => `${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`).join('; ');
    throw new Error(`${where}: body does not match docs/openapi.json: ${errs}: ` +
                    `${String(text).slice(0, 300)}`);
  }
}

const seenFile = process.env.CABIN_OPENAPI_SEEN;

// Throws when an answer is not one docs/openapi.json allows for this request.
export function checkAnswer(method, urlPath, status, contentType, text) {
  const { doc } = load();
  const where = `${method} ${urlPath.replace(/token=[^&]*/g, 'token=…')} → ${status}`;
  const found = findOperation(method, urlPath);
  if (!found || !found.op) {
    // Unknown path or method: the router's refusal, in the common error shape.
    if (![400, 401, 403, 404, 405].includes(status)) {
      throw new Error(`${where}: no operation in docs/openapi.json for this request`);
    }
    const ct = (contentType ?? '').split(';')[0].trim().toLowerCase();
    if (isJson(ct)) checkBody(where, 'openapi.json#/components/schemas/Error', ct, text);
    return;
  }
  const { tmpl, op } = found;
  const responses = op.responses ?? {};
  const key = [String(status), `${String(status)[0]}XX`, 'default'].find((k) => responses[k]);
  if (!key) {
    throw new Error(`${where}: status ${status} is not documented for ${method} ${tmpl}`);
  }
  if (seenFile) fs.appendFileSync(seenFile, `${method} ${tmpl} ${status}\n`);
  const res = resolve(doc, responses[key]);
  const content = res.content ?? {};
  const types = Object.keys(content);
  if (!types.length || method === 'HEAD' || status === 101 || status === 204 || status === 304) return;
  const ct = (contentType ?? '').split(';')[0].trim().toLowerCase();
  const media = types.find((t) => t.toLowerCase() === ct) ??
    types.find((t) => t.endsWith('/*') && ct.startsWith(t.slice(0, -1))) ??
    types.find((t) => t === '*/*');
  if (!media) {
    throw new Error(`${where}: content type "${contentType}" is not among ${types.join(', ')}`);
  }
  if (!content[media].schema) return;
  const ref = responses[key].$ref
    ? `openapi.json#/${responses[key].$ref.slice(2).split('/').map(encodeURIComponent).join('/')}` +
      `/content/${pointer(media)}/schema`
    : `openapi.json#/paths/${pointer(tmpl, method.toLowerCase(), 'responses', key, 'content', media, 'schema')}`;
  checkBody(where, ref, ct, text);
}
