// A low-level MCP server on the TypeScript SDK with no resources/templates/list handler, for
// agentd's interop tests (issue 37 item 8, rfcs/0378).
//
// Written the way many published TypeScript servers are: the SDK's low-level `Server` with a
// handler for each method it serves and none for resource templates, so the SDK answers
// `resources/templates/list` with -32601 "Method not found" (every SDK release from 1.0.4 to
// 1.32.2 does). It runs against whichever SDK copy it is given, so one file serves the old and
// the current release the tests pin (tests/thirdparty/npm/package.json):
//
//     node ts_lowlevel_server.mjs SDK_DIR [--change-after-subscribe MS]
//
// SDK_DIR is the SDK's package directory (its `dist/esm/` or, in 1.0.x, `dist/`). Catalog:
// tools `add(a, b)` and `set_note(name, text)`; resources `note://alpha`, `note://beta`,
// subscribable. A change sends `notifications/resources/updated` when the note is subscribed.
// With `--change-after-subscribe MS`, the server changes a note itself MS ms after a client
// subscribes to it (the text becomes "changed by the server"), so a test needs no second client.

import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, ...rest] = process.argv.slice(2);
if (!sdkDir) {
  console.error("usage: node ts_lowlevel_server.mjs SDK_DIR [--change-after-subscribe MS]");
  process.exit(2);
}
const flag = rest.indexOf("--change-after-subscribe");
const changeAfter = flag >= 0 ? Number(rest[flag + 1]) : null;

const dist = existsSync(join(sdkDir, "dist", "esm")) ? join(sdkDir, "dist", "esm") : join(sdkDir, "dist");
const load = (path) => import(pathToFileURL(join(dist, path)).href);
const { Server } = await load("server/index.js");
const { StdioServerTransport } = await load("server/stdio.js");
const types = await load("types.js");
const sdkVersion = JSON.parse(readFileSync(join(sdkDir, "package.json"), "utf8")).version;

const notes = new Map([
  ["alpha", "first"],
  ["beta", "second"],
]);
const subscribed = new Set();

const server = new Server(
  { name: "ts-lowlevel", version: sdkVersion },
  { capabilities: { tools: {}, resources: { subscribe: true } } },
);

async function change(name, text) {
  notes.set(name, text);
  const uri = `note://${name}`;
  if (subscribed.has(uri)) {
    await server.sendResourceUpdated({ uri });
  }
}

server.setRequestHandler(types.ListToolsRequestSchema, async () => ({
  tools: [
    {
      name: "add",
      description: "Add two integers.",
      inputSchema: {
        type: "object",
        properties: { a: { type: "integer" }, b: { type: "integer" } },
        required: ["a", "b"],
      },
    },
    {
      name: "set_note",
      description: "Change a note and notify its subscribers.",
      inputSchema: {
        type: "object",
        properties: { name: { type: "string" }, text: { type: "string" } },
        required: ["name", "text"],
      },
    },
  ],
}));

server.setRequestHandler(types.CallToolRequestSchema, async (request) => {
  const args = request.params.arguments ?? {};
  if (request.params.name === "add") {
    return { content: [{ type: "text", text: String(Number(args.a) + Number(args.b)) }] };
  }
  if (request.params.name === "set_note") {
    await change(String(args.name), String(args.text));
    return { content: [{ type: "text", text: `${args.name} = ${args.text}` }] };
  }
  return { content: [{ type: "text", text: `unknown tool ${request.params.name}` }], isError: true };
});

server.setRequestHandler(types.ListResourcesRequestSchema, async () => ({
  resources: [...notes.keys()].map((name) => ({ uri: `note://${name}`, name, mimeType: "text/plain" })),
}));

server.setRequestHandler(types.ReadResourceRequestSchema, async (request) => {
  const uri = request.params.uri;
  const name = uri.replace(/^note:\/\//, "");
  if (!notes.has(name)) {
    throw new Error(`no note ${uri}`);
  }
  return { contents: [{ uri, mimeType: "text/plain", text: notes.get(name) }] };
});

server.setRequestHandler(types.SubscribeRequestSchema, async (request) => {
  const uri = request.params.uri;
  subscribed.add(uri);
  if (changeAfter !== null) {
    setTimeout(() => change(uri.replace(/^note:\/\//, ""), "changed by the server"), changeAfter);
  }
  return {};
});

server.setRequestHandler(types.UnsubscribeRequestSchema, async (request) => {
  subscribed.delete(request.params.uri);
  return {};
});

await server.connect(new StdioServerTransport());
