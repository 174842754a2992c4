// An MCP client built on the official TypeScript SDK, driven by the Go tests
// of `dispatcher mcp` (cmd/dispatcher/mcp_test.go).
//
//   node client.mjs '<plan JSON>'
//
// The plan names the transport and the steps:
//   {"transport": "stdio", "command": "...", "args": [...], "env": {...}}
//   {"transport": "http", "url": "http://127.0.0.1:port/mcp", "token": "..."}   (token optional)
//   "steps": [
//     {"op": "list"},
//     {"op": "call", "name": "echo", "arguments": {...}, "progress": true, "meta": {...}},
//     {"op": "cancel", "name": "echo", "arguments": {...}}   // aborts the call at its first progress notification
//   ]
// Every step prints one JSON line on stdout: {"op", "result"} or {"op", "error"}. A connection
// failure prints {"op": "connect", "error", "status"} and ends the run. The exit code is 0 unless the
// plan itself is invalid.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const plan = JSON.parse(process.argv[2]);
const print = (line) => process.stdout.write(JSON.stringify(line) + '\n');

function transportFor(plan) {
  switch (plan.transport) {
    case 'stdio':
      return new StdioClientTransport({
        command: plan.command,
        args: plan.args ?? [],
        env: { ...getDefaultEnvironment(), ...(plan.env ?? {}) },
        stderr: 'inherit',
      });
    case 'http': {
      const headers = plan.token ? { Authorization: `Bearer ${plan.token}` } : {};
      return new StreamableHTTPClientTransport(new URL(plan.url), { requestInit: { headers } });
    }
    default:
      throw new Error(`unknown transport ${plan.transport}`);
  }
}

function describe(err) {
  return { error: String(err?.message ?? err), code: err?.code, status: err?.code };
}

const client = new Client({ name: 'capstan-frontdoor-test', version: '1.0.0' });
try {
  await client.connect(transportFor(plan));
} catch (err) {
  print({ op: 'connect', ...describe(err) });
  process.exit(0);
}
print({ op: 'connect', result: { server: client.getServerVersion(), protocol: client.transport?.protocolVersion } });

for (const step of plan.steps ?? []) {
  try {
    switch (step.op) {
      case 'list': {
        const { tools } = await client.listTools();
        print({ op: step.op, result: tools });
        break;
      }
      case 'call': {
        const progress = [];
        const options = { timeout: 60000 };
        if (step.progress) options.onprogress = (p) => progress.push(p);
        const params = { name: step.name, arguments: step.arguments ?? {} };
        if (step.meta) params._meta = step.meta;
        const result = await client.callTool(params, undefined, options);
        print({ op: step.op, result, progress });
        break;
      }
      case 'cancel': {
        const ac = new AbortController();
        const progress = [];
        const options = {
          timeout: 60000,
          signal: ac.signal,
          onprogress: (p) => {
            progress.push(p);
            ac.abort(new Error('cancelled by the test'));
          },
        };
        try {
          const result = await client.callTool({ name: step.name, arguments: step.arguments ?? {} }, undefined, options);
          print({ op: step.op, result, progress });
        } catch (err) {
          print({ op: step.op, ...describe(err), progress });
        }
        break;
      }
      default:
        throw new Error(`unknown op ${step.op}`);
    }
  } catch (err) {
    print({ op: step.op, ...describe(err) });
  }
}
await client.close();
