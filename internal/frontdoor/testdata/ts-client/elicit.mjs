// An MCP client built on the official TypeScript SDK, driven by the Go tests
// of the MCP front door's approval questions (internal/frontdoor/elicitation_test.go).
//
//   node elicit.mjs '<plan JSON>'
//
// The plan:
//   {"url": "http://127.0.0.1:port/mcp", "token": "...",
//    "elicitation": true,                                  // declare the elicitation capability
//    "answer": {"action": "accept", "content": {...}},     // the answer to every elicitation/create
//    "calls": [{"name": "echo", "arguments": {...}}]}
// Every call prints one JSON line on stdout: {"op": "call", "result"} or {"op": "call", "error"};
// then one line {"op": "elicitations", "result": [<params of each elicitation/create>]}. A
// connection failure prints {"op": "connect", "error"} and ends the run.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const plan = JSON.parse(process.argv[2]);
const print = (line) => process.stdout.write(JSON.stringify(line) + '\n');

const capabilities = plan.elicitation ? { elicitation: {} } : {};
const client = new Client({ name: 'capstan-frontdoor-elicit-test', version: '1.0.0' }, { capabilities });
const asked = [];
if (plan.elicitation) {
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push(request.params);
    return plan.answer;
  });
}

const headers = plan.token ? { Authorization: `Bearer ${plan.token}` } : {};
const transport = new StreamableHTTPClientTransport(new URL(plan.url), { requestInit: { headers } });
try {
  await client.connect(transport);
} catch (err) {
  print({ op: 'connect', error: String(err?.message ?? err) });
  process.exit(0);
}
for (const call of plan.calls ?? []) {
  try {
    const result = await client.callTool({ name: call.name, arguments: call.arguments ?? {} }, undefined, { timeout: 60000 });
    print({ op: 'call', result });
  } catch (err) {
    print({ op: 'call', error: String(err?.message ?? err) });
  }
}
print({ op: 'elicitations', result: asked });
await transport.terminateSession(); // DELETE: the server ends the session now
await client.close();
