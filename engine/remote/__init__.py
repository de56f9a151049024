"""A model on an OpenAI-compatible server as an EngineLike (same events as the local Engine), its HTTP client,
what a server says of its own speculation, and the router that runs settings on several engines."""
