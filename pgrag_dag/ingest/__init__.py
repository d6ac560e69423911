"""Documents in (paper §4.1, §5.5): :mod:`.sources` (reading the configured files and JSONL records),
:mod:`.splitting` (sentence and paragraph spans; chunk frames) and :mod:`.chunkers` (the built-in
chunker algorithms)."""
