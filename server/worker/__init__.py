"""The engine worker: the engine thread, its inbox and events, admission and the wait
estimate, the arrival window and embedding jobs. The loop thread talks to it through
`bridge.EngineBridge`."""
