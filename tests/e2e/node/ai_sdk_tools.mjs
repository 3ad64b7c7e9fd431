// The Vercel AI SDK (npm `ai` + `@ai-sdk/openai`, pinned in the Makefile's `node-client`
// target) against a tl-serve (tests/e2e/test_responses_node.py): the default provider
// `openai(model)` speaks the Responses API; one generateText and one streamText, each
// with a `weather` tool and toolChoice 'required'. Prints what the SDK parsed as one JSON line.
// usage: node ai_sdk_tools.mjs <base url ending in /v1> <model>
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText, tool } from "ai";
import { z } from "zod";

const [baseURL, model] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey: "unused" });
const tools = {
  weather: tool({
    description: "The weather in a city.",
    inputSchema: z.object({ city: z.enum(["Paris", "Oslo", "Lima"]) }),
  }),
};
const ask = { model: openai(model), tools, toolChoice: "required", temperature: 0,
              maxOutputTokens: 80, maxRetries: 0, prompt: "What is the weather in Paris?" };

const whole = await generateText(ask);
const streamed = streamText(ask);
const parts = [];
for await (const part of streamed.fullStream) parts.push(part.type);
const calls = (result) => result.map((c) => ({ name: c.toolName, input: c.input, id: c.toolCallId }));
console.log(JSON.stringify({
  whole: { finish: whole.finishReason, calls: calls(whole.toolCalls), usage: whole.usage },
  streamed: { finish: await streamed.finishReason, calls: calls(await streamed.toolCalls), parts },
}));
