"""Model fixture plugin: a local OpenAI-compatible stub server reached through real litellm calls."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pgrag_dag.testing.stub_server import StubServer  # noqa: E402


@pytest.fixture
def stub_llm() -> Iterator[StubServer]:
    """A stub server whose ``answer`` tests replace; by default it answers an empty extraction."""
    with StubServer(lambda messages: '{"entities": [], "triples": []}') as server:
        yield server
