// A minimal MCP tools/call bridge over stdio (newline-delimited JSON-RPC):
// tools/list answers with the personality's tools, tools/call runs a
// Capstan call and answers with a CallToolResult. (The Go dispatcher's
// `dispatcher mcp` is the full front door; this shows the envelope only.)
import { createInterface } from "node:readline";
import { CapstanClient } from "@capstanhq/client";
import { fromMCP, mcpTools, toMCP } from "@capstanhq/client/envelope";

const capstan = await CapstanClient.connect({ servers: "nats://127.0.0.1:4222" });
const send = (msg: unknown) => process.stdout.write(JSON.stringify(msg) + "\n");

for await (const line of createInterface({ input: process.stdin })) {
  const req = JSON.parse(line);
  if (req.method === "tools/list") {
    send({ jsonrpc: "2.0", id: req.id, result: { tools: mcpTools(await capstan.tools({ personality: "default" })) } });
  } else if (req.method === "tools/call") {
    const call = fromMCP(req, { session_id: "mcp-session" });
    const result = call.failure ?? (await capstan.executeParallel([call.call]))[0]!;
    send(toMCP(call, result));
  }
}
await capstan.close();
