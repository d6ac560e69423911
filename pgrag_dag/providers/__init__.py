"""Model access (paper §3.5): :mod:`.llm` (the litellm client with its response cache, replay and
deadlines), :mod:`.embedding` (the embedders: local MiniLM, hashing, litellm), :mod:`.model_errors`
(how a failed model call is classified and recorded), :mod:`.prompts` and :mod:`.json_reply`
(reading the JSON object of a model's reply)."""
