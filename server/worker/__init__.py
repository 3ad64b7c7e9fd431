"""The engine worker: each model's own thread. A chat model's engine thread with its inbox
and events, admission and the wait estimate, the arrival window and embedding jobs (the
loop thread talks to it through `bridge.EngineBridge`); a sentence-embedding model's thread
(`encoder_thread.EncoderThread`)."""
