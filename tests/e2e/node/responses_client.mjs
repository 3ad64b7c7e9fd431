// openai-node's `responses.create` against a tl-serve (tests/e2e/test_responses_node.py):
// one whole answer and one stream; prints what the client parsed as one JSON line.
// usage: node responses_client.mjs <base url ending in /v1> <model>
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 30000 });

const whole = await client.responses.create({
  model, input: "a", instructions: "be brief", max_output_tokens: 3, temperature: 0,
});
const stream = await client.responses.create({
  model, input: [{ role: "user", content: [{ type: "input_text", text: "k" }] }],
  max_output_tokens: 4, temperature: 0, stream: true,
});
const events = [];
for await (const event of stream) events.push(event);
let refused = null;
try {
  await client.responses.create({ model, input: "a", store: true });
} catch (err) {
  refused = { status: err.status, param: err.param ?? err.error?.param };
}
console.log(JSON.stringify({
  whole: { id: whole.id, status: whole.status, text: whole.output_text,
           reason: whole.incomplete_details?.reason, usage: whole.usage },
  events: events.map((e) => ({ type: e.type, seq: e.sequence_number, delta: e.delta })),
  final: events.at(-1).response.output[0].content[0].text,
  refused,
}));
