"""Configuration: the settings sections (:mod:`.sections`, a leaf every layer may read) and their
loading (:mod:`.load`: file, environment, arguments, then the operator composition checked).

``from pgrag_dag.config import Settings, load_settings`` keeps working. The engine's own modules
import :mod:`pgrag_dag.config.sections` directly; ``load_settings`` and ``config_file`` are looked up
on first use (PEP 562), because loading composes every space's operators from the layers above the
sections — the one deliberate lazy import of the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgrag_dag.config.sections import (
    ChunkingSettings,
    CommunitySettings,
    CypherSettings,
    DagsterSettings,
    EmbeddingSettings,
    ExportSettings,
    ExtractionSettings,
    GateSettings,
    LLMSettings,
    ModelExtractionSettings,
    OperationsSettings,
    OperatorSpec,
    RealmSpec,
    RetentionSettings,
    RetrievalSettings,
    Settings,
    SourceSpec,
    SpaceSpec,
    TelemetrySettings,
    TemporalSettings,
)

if TYPE_CHECKING:
    from pgrag_dag.config.load import config_file, load_settings

__all__ = [
    "ChunkingSettings",
    "CommunitySettings",
    "CypherSettings",
    "DagsterSettings",
    "EmbeddingSettings",
    "ExportSettings",
    "ExtractionSettings",
    "GateSettings",
    "LLMSettings",
    "ModelExtractionSettings",
    "OperationsSettings",
    "OperatorSpec",
    "RealmSpec",
    "RetentionSettings",
    "RetrievalSettings",
    "Settings",
    "SourceSpec",
    "SpaceSpec",
    "TelemetrySettings",
    "TemporalSettings",
    "config_file",
    "load_settings",
]

_LOADING = frozenset({"config_file", "load_settings"})


def __getattr__(name: str) -> Any:
    if name in _LOADING:
        from pgrag_dag.config import load

        return getattr(load, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
