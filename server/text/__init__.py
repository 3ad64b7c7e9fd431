"""The text layer between the API and the engine: the served model (template, tokenizer,
context rules), typed messages, the detokenising output stream with stop strings, and
the tool-call formats. The API knows JSON, the engine knows token ids; this room knows text."""
