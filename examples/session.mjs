// The few calls the examples make to Cabin's HTTP API: create a session and delete it. The
// server and key come from CABIN_URL and CABIN_API_KEY; CABIN_SESSION_SPEC (JSON) adds to the
// create spec, e.g. a network policy.
const base = (process.env.CABIN_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
const headers = {
  authorization: `Bearer ${process.env.CABIN_API_KEY}`,
  'content-type': 'application/json',
};

export async function cabin(method, path, body) {
  const res = await fetch(base + path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

export async function createSession(spec = {}) {
  return cabin('POST', '/v1/sessions', { ...JSON.parse(process.env.CABIN_SESSION_SPEC ?? '{}'), ...spec });
}

export async function deleteSession(id) {
  await cabin('DELETE', `/v1/sessions/${id}`);
}
