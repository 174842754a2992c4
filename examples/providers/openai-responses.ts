// One agent turn with the OpenAI Responses API: function_call items in,
// function_call_output items back. Plain fetch, no SDK.
import { CapstanClient } from "@capstanhq/client";
import { execute, fromOpenAIResponses, openAIResponsesTools, toOpenAIResponses } from "@capstanhq/client/envelope";

const capstan = await CapstanClient.connect({ servers: "nats://127.0.0.1:4222" });
const tools = openAIResponsesTools(await capstan.tools({ personality: "default" }));
let input: unknown[] = [{ role: "user", content: "Echo 'hello' twice, in parallel." }];
let previous: string | undefined;

for (let turn = 0; turn < 8; turn++) {
  const res = await fetch("https://api.openai.com/v1/responses", {
    method: "POST",
    headers: { authorization: `Bearer ${process.env.OPENAI_API_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "gpt-4.1", input, tools, previous_response_id: previous }),
  });
  const response = (await res.json()) as { id: string; output: unknown[] };
  const calls = fromOpenAIResponses(response, { session_id: "session-1" });
  if (calls.length === 0) break; // no function_call item: the model answered
  previous = response.id;
  input = toOpenAIResponses(calls, await execute(capstan, calls, { batchID: response.id }));
}
await capstan.close();
