// One agent turn with Anthropic Messages: tool definitions with
// input_schema, tool_use blocks in, a user message of tool_result blocks
// (is_error on failures) back. Plain fetch, no SDK.
import { CapstanClient } from "@capstanhq/client";
import { anthropicTools, execute, fromAnthropic, toAnthropic } from "@capstanhq/client/envelope";

const capstan = await CapstanClient.connect({ servers: "nats://127.0.0.1:4222" });
const tools = anthropicTools(await capstan.tools({ personality: "default" }));
const messages: unknown[] = [{ role: "user", content: "Read README.md and summarise it." }];

for (let turn = 0; turn < 8; turn++) {
  const res = await fetch("https://api.anthropic.com/v1/messages", {
    method: "POST",
    headers: { "x-api-key": process.env.ANTHROPIC_API_KEY ?? "", "anthropic-version": "2023-06-01", "content-type": "application/json" },
    body: JSON.stringify({ model: "claude-sonnet-4-5", max_tokens: 2048, messages, tools }),
  });
  const msg = (await res.json()) as { id: string; content: unknown[]; stop_reason: string };
  messages.push({ role: "assistant", content: msg.content });
  if (msg.stop_reason !== "tool_use") break;
  const calls = fromAnthropic(msg, { session_id: "session-1", working_dir: "/srv/agents/coder" });
  messages.push(toAnthropic(calls, await execute(capstan, calls, { batchID: msg.id })));
}
await capstan.close();
