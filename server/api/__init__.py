"""The OpenAI API: request documents in, response documents and SSE events out, one
module per endpoint family over shared field validators and error documents."""
