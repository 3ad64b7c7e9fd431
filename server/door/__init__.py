"""The front door: what every API route shares before the OpenAI meaning -- the router,
the API key, CORS, the access log, the request id, the answers while the models load."""
