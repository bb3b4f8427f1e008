"""OpenAI-compatible streaming client: SSE parsing, request records."""
