// The Vercel AI SDK (npm `ai` + `@ai-sdk/openai`, pinned in the Makefile) against a tl-serve
// through its default provider `openai(model)`, the Responses API: `generateObject` with a
// zod schema, and `generateText` with one tool forced by name (toolChoice {type: "tool"}).
// Run by tests/e2e/test_structured_clients.py and bench/client_lengths.py.
// usage: node ai_sdk_objects.mjs <base url ending in /v1> <model> <prompts.json> <max tokens>
// One JSON line per prompt and call: {"call", "finish", "object" or "calls", "error"}.
import { readFileSync } from "node:fs";
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, tool } from "ai";
import { z } from "zod";

const [baseURL, model, promptsPath, maxTokens] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey: "unused" });
const person = z.object({ name: z.string(), age: z.number().int(), job: z.string() });
const booking = tool({
  description: "Book a hotel room.",
  inputSchema: z.object({ city: z.string(), nights: z.number().int(), guest: z.string() }),
});
const common = { model: openai(model), temperature: 0, maxOutputTokens: Number(maxTokens),
                 maxRetries: 0 };

for (const prompt of JSON.parse(readFileSync(promptsPath, "utf8"))) {
  for (const call of ["generateObject", "forcedTool"]) {
    const line = { call, finish: null, error: null };
    try {
      if (call === "generateObject") {
        const result = await generateObject({ ...common, schema: person, prompt });
        Object.assign(line, { finish: result.finishReason, object: result.object });
      } else {
        const result = await generateText({ ...common, tools: { booking }, prompt,
                                            toolChoice: { type: "tool", toolName: "booking" } });
        Object.assign(line, { finish: result.finishReason,
                              calls: result.toolCalls.map((c) => ({ name: c.toolName, input: c.input })),
                              text: result.text });
      }
    } catch (err) {
      line.error = err.name || String(err);
    }
    console.log(JSON.stringify(line));
  }
}
