// The tool side of an Anthropic computer-use loop, backed by a Cabin session: each `tool_use`
// block the model sends for the computer tool becomes a `tool_result` block to send back.
// Cabin's /computer takes Anthropic's action vocabulary as it is, so the handler passes the
// input through and turns the answer into content: an image for a screenshot or zoom, text for
// the rest, `is_error` when Cabin refused.
//
// Run on recorded model turns (a JSON array of assistant messages), without calling a model:
//   CABIN_API_KEY=... node examples/anthropic-computer-use.mjs examples/recorded/anthropic-turns.json
// In a live loop, call `handle` on each tool_use block of the model's answer and send the
// results back in a user message (see Anthropic's computer-use documentation).
import fs from 'node:fs';
import { pathToFileURL } from 'node:url';

import { cabin, createSession, deleteSession } from './session.mjs';

// The computer tool's definition for the Messages API, sized to the session's screen.
export function computerTool(session) {
  const { width, height } = session.display ?? session.resolution;
  return { type: 'computer_20250124', name: 'computer', display_width_px: width,
           display_height_px: height };
}

export function toolHandler(session) {
  return async function handle(toolUse) {
    try {
      const answer = await cabin('POST', `/v1/sessions/${session.id}/computer`, toolUse.input);
      const result = answer.results[0] ?? {};
      const content = result.data
        ? [{ type: 'image', source: { type: 'base64', media_type: result.media_type, data: result.data } }]
        : [{ type: 'text', text: result.op === 'cursor_position' ? `X=${result.x},Y=${result.y}` : 'done' }];
      return { type: 'tool_result', tool_use_id: toolUse.id, content };
    } catch (err) {
      return { type: 'tool_result', tool_use_id: toolUse.id, is_error: true,
               content: [{ type: 'text', text: err.message }] };
    }
  };
}

async function main(file) {
  const turns = JSON.parse(fs.readFileSync(file, 'utf8'));
  const session = await createSession({ resolution: { width: 1024, height: 768 } });
  try {
    const handle = toolHandler(session);
    for (const turn of turns) {
      for (const block of turn.content) {
        if (block.type !== 'tool_use' || block.name !== 'computer') continue;
        const r = await handle(block);
        // One line per result, the image's bytes left out.
        console.log(JSON.stringify({ session: session.id, action: block.input.action,
          is_error: !!r.is_error, content: r.content.map((c) => (c.type === 'image'
            ? { type: 'image', media_type: c.source.media_type, bytes: c.source.data.length }
            : c)) }));
      }
    }
    if (process.env.KEEP_SESSION) console.log(JSON.stringify({ kept: session.id }));
  } finally {
    if (!process.env.KEEP_SESSION) await deleteSession(session.id);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) await main(process.argv[2]);
