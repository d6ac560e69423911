"""Tools for tests and for recording cassettes: :mod:`.stub_server` (a local OpenAI-compatible model
server). Not used by the engine itself."""
