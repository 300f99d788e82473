// Playwright MCP (@playwright/mcp) driving a Cabin session's browser: it takes the session's
// CDP URL with --cdp-endpoint, and any MCP client then works the page through its tools. Here
// the client is the MCP SDK's, over stdio, and no model is involved: it opens a page and prints
// the accessibility snapshot Playwright MCP gives a model.
//   CABIN_API_KEY=... node examples/playwright-mcp.mjs https://example.com
import { createRequire } from 'node:module';
import path from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

import { createSession, deleteSession } from './session.mjs';

const cli = path.join(
  path.dirname(createRequire(import.meta.url).resolve('@playwright/mcp/package.json')), 'cli.js');
const session = await createSession({ resolution: { width: 1280, height: 800 } });
const client = new Client({ name: 'cabin-example', version: '1.0.0' });
try {
  await client.connect(new StdioClientTransport({
    command: process.execPath, args: [cli, '--cdp-endpoint', session.cdp_url], stderr: 'inherit',
  }));
  const url = process.argv[2] ?? 'data:text/html,<title>hello</title><h1>hello</h1>';
  await client.callTool({ name: 'browser_navigate', arguments: { url } });
  const snap = await client.callTool({ name: 'browser_snapshot', arguments: {} });
  console.log(JSON.stringify({ session: session.id,
                               snapshot: snap.content.map((c) => c.text ?? '').join('\n') }));
} finally {
  await client.close();
  await deleteSession(session.id);
}
