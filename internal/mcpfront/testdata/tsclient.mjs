// The official TypeScript SDK client (@modelcontextprotocol/client) against
// one turn: connect at one revision, list, call (allowed), call (refused),
// call an unknown tool. Driven by mcpfront's tests (tsclient_test.go);
// prints one JSON object with what each step returned or threw.
//
// argv: <client package dir> <json config>
// config: {url, token, version, tool, okArgs, refusedArgs}
//         or {stdio: {command, args, env}, version, tool, okArgs, refusedArgs}
import { pathToFileURL } from "node:url";
import path from "node:path";

const [dir, raw] = process.argv.slice(2);
const cfg = JSON.parse(raw);
const pkg = path.join(dir, "node_modules", "@modelcontextprotocol", "client", "dist");
const { Client, StreamableHTTPClientTransport } = await import(pathToFileURL(path.join(pkg, "index.mjs")).href);

const modern = cfg.version >= "2026-07-28";
const client = new Client({ name: "sharedos-tsclient-test", version: "1" }, {
  versionNegotiation: modern ? { mode: { pin: cfg.version } } : { mode: "legacy" },
  supportedProtocolVersions: modern ? undefined : [cfg.version],
});
let transport;
if (cfg.stdio) {
  const { StdioClientTransport } = await import(pathToFileURL(path.join(pkg, "stdio.mjs")).href);
  transport = new StdioClientTransport({ command: cfg.stdio.command, args: cfg.stdio.args, env: cfg.stdio.env, stderr: "inherit" });
} else {
  transport = new StreamableHTTPClientTransport(new URL(cfg.url), {
    requestInit: { headers: { Authorization: `Bearer ${cfg.token}` } },
  });
}
const out = {};
const step = async (name, f) => {
  try {
    out[name] = { ok: await f() };
  } catch (e) {
    out[name] = { error: String(e && e.message || e), code: e && e.code };
  }
};
await step("connect", async () => {
  await client.connect(transport);
  return { version: client.getNegotiatedProtocolVersion ? client.getNegotiatedProtocolVersion() : undefined };
});
if (out.connect.ok) {
  await step("list", () => client.listTools());
  await step("call", () => client.callTool({ name: cfg.tool, arguments: cfg.okArgs }));
  await step("refused", () => client.callTool({ name: cfg.tool, arguments: cfg.refusedArgs }));
  await step("unknown", () => client.callTool({ name: "never_shown", arguments: {} }));
  if (cfg.extra) {
    for (const [name, args] of Object.entries(cfg.extra)) {
      await step("extra:" + name, () => client.callTool({ name, arguments: args }));
    }
  }
}
try { await client.close(); } catch {}
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
