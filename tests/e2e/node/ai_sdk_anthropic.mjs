// The Vercel AI SDK's Anthropic provider (npm `ai` + `@ai-sdk/anthropic`, pinned in the
// Makefile's NODE_PINS) against a tl-serve (tests/e2e/test_anthropic_node.py), its baseURL
// pointed at the server's /v1. Mode "text": one generateText and one streamText at
// temperature 0; mode "tool": a `weather` tool with toolChoice 'required' (the provider sends
// tool_choice {type: "any"}), whole and streamed. Prints what the SDK parsed as one JSON line.
// usage: node ai_sdk_anthropic.mjs <base url ending in /v1> <model> <text|tool>
import { createAnthropic } from "@ai-sdk/anthropic";
import { generateText, streamText, tool } from "ai";
import { z } from "zod";

const [baseURL, model, mode] = process.argv.slice(2);
const anthropic = createAnthropic({ baseURL, apiKey: "unused" });
const tools = {
  weather: tool({
    description: "The weather in a city.",
    inputSchema: z.object({ city: z.enum(["Paris", "Oslo", "Lima"]) }),
  }),
};
const ask = mode === "tool"
  ? { model: anthropic(model), tools, toolChoice: "required", temperature: 0,
      maxOutputTokens: 60, maxRetries: 0, prompt: "What is the weather in Paris?" }
  : { model: anthropic(model), temperature: 0, maxOutputTokens: 5, maxRetries: 0,
      prompt: "abc" };

const whole = await generateText(ask);
const streamed = streamText(ask);
const parts = [];
let text = "";
for await (const part of streamed.fullStream) {
  parts.push(part.type);
  if (part.type === "text-delta") text += part.text;
  if (part.type === "error") throw part.error;
}
const calls = (result) => result.map((c) => ({ name: c.toolName, input: c.input, id: c.toolCallId }));
console.log(JSON.stringify({
  whole: { text: whole.text, finish: whole.finishReason, calls: calls(whole.toolCalls),
           usage: whole.usage },
  streamed: { text, finish: await streamed.finishReason, calls: calls(await streamed.toolCalls),
              parts },
}));
