"""The front door: what every API route shares before the OpenAI meaning -- the route
table, the API key, CORS, the access log, the request id."""
