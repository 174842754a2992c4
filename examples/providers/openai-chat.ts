// One agent turn with OpenAI Chat Completions: the personality's tools as
// function definitions, the model's tool_calls run by Capstan, the results
// back as {role: "tool"} messages. Plain fetch, no SDK.
import { CapstanClient } from "@capstanhq/client";
import { execute, fromOpenAIChat, openAIChatTools, toOpenAIChat } from "@capstanhq/client/envelope";

const capstan = await CapstanClient.connect({ servers: "nats://127.0.0.1:4222", personality: "researcher" });
const tools = openAIChatTools(await capstan.tools({ personality: "researcher" }));
const messages: unknown[] = [{ role: "user", content: "What does https://example.com say?" }];

for (let turn = 0; turn < 8; turn++) {
  const res = await fetch("https://api.openai.com/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${process.env.OPENAI_API_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "gpt-4.1", messages, tools }),
  });
  const message = ((await res.json()) as { choices: Array<{ message: { tool_calls?: unknown[] } }> }).choices[0]!.message;
  messages.push(message);
  if (!message.tool_calls?.length) break; // the model answered
  // Malformed calls (arguments that are not JSON, ...) are answered in place, not thrown.
  const calls = fromOpenAIChat(message, { session_id: "session-1", current_turn: turn });
  messages.push(...toOpenAIChat(calls, await execute(capstan, calls)));
}
await capstan.close();
