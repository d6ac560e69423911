"""Settings sections: one pydantic-settings model (env prefix ``PGRAG_``, optional YAML file) and its
sections — a leaf, loaded by :mod:`pgrag_dag.config.load`.

Precedence, highest first: keyword arguments > environment (``PGRAG_…``, nested with ``__``) >
YAML file (``PGRAG_CONFIG`` or ``./pgrag.yaml``) > defaults. Document sources per realm/space are
declared in the same file; the Dagster code location derives its partitions from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from pgrag_dag.errors import ConfigurationError, QueryError
from pgrag_dag.names import partition_key, validate_realm, validate_space
from pgrag_dag.query_param import QueryParam, setting_fields
from pgrag_dag.vocabulary import Vocabulary


class StrictModel(BaseModel):
    """A settings section that refuses unknown keys (a typo is an error naming the nearest valid key,
    :mod:`pgrag_dag.config.suggestions`)."""

    model_config = ConfigDict(extra="forbid")


class SourceSpec(BaseModel):
    """One document source: a directory with a glob, or a single file; text files, or JSONL files in
    which each line is a document (``text_field`` holds its text, ``title_field`` its title, ``key_field``
    — a URL or id — its doc_key, and ``metadata_fields`` are kept as document metadata).

    ``path`` is resolved against the configuration file's directory when relative. ``format`` ``auto``
    reads ``*.jsonl`` files as JSONL and everything else as text. ``exclude``: globs relative to ``path``
    (a directory) naming files, or directories, left out (e.g. ``drafts/**``, ``*.tmp.md``). A text file's
    doc_key is ``key_prefix`` + its path relative to ``path`` (a single-file source: its file name), so it
    does not depend on where the configuration lives (issue 16); ``key_prefix`` (e.g. ``handbook/``) tells
    apart two sources holding the same relative paths.
    """

    model_config = ConfigDict(extra="forbid")

    path: Path
    glob: str = "*.txt"
    format: Literal["auto", "text", "jsonl"] = "auto"
    text_field: str = "text"
    title_field: str = "title"
    key_field: str | None = None
    metadata_fields: list[str] = Field(default_factory=list)
    key_prefix: str = ""
    exclude: list[str] = Field(default_factory=list)


class OperatorSpec(BaseModel):
    """One configured operator (:mod:`pgrag_dag.operators`): ``name`` — a built-in, an import path
    ``module:attribute`` or an entry point of group ``pgrag_dag.operators`` — and its ``options``.
    A bare string in YAML means ``{name: <string>}``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value


class SpaceSpec(BaseModel):
    """A space's document sources, the rule that gives documents their order (§5.2: ``filename`` across
    all sources, ``listed`` = the sources' order, ``metadata`` = a metadata field such as a publication
    date or fiscal year, ``order_field``, ties by file name), and its predicate
    vocabulary (§4.5): a preset (``biography``, ``finance``, ``narrative``), extra terms, an alias map,
    exclusive predicate groups and single-valued predicates (predicate → the side with one value at a
    time: ``object`` for ``headquartered_in``, ``subject`` for ``cfo_of``; ``none`` takes a preset's
    out — :class:`~pgrag_dag.vocabulary.Vocabulary`). ``allow_empty``: the sources may name no document
    even when the space holds an index (removing all of it); otherwise that is refused.
    ``allow_empty_runs``: a run of this space may extract nothing or have every candidate refused
    (:class:`ExtractionSettings`' ``allow_empty_runs``, for this space only)."""

    model_config = ConfigDict(extra="forbid")

    sources: list[SourceSpec]
    order: Literal["filename", "listed", "metadata"] = "filename"
    order_field: str | None = None
    preset: str | None = None
    vocabulary: list[str] = Field(default_factory=list)
    predicate_aliases: dict[str, str] = Field(default_factory=dict)
    exclusive_groups: list[list[str]] = Field(default_factory=list)
    single_valued: dict[str, Literal["subject", "object", "none"]] = Field(default_factory=dict)
    chunker: OperatorSpec | None = None
    extractor: OperatorSpec | None = None
    gates: list[OperatorSpec] = Field(default_factory=list)
    enrichers: list[OperatorSpec] = Field(default_factory=list)
    reports: Literal["auto", "model", "extractive"] = "auto"
    allow_empty: bool = False
    allow_empty_runs: bool = False

    @field_validator("gates", "enrichers", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    @model_validator(mode="after")
    def _vocabulary(self) -> SpaceSpec:
        if self.order == "metadata" and not self.order_field:
            raise ValueError("order: metadata needs order_field (e.g. publication_date or fiscal_year)")
        try:
            Vocabulary.build(
                preset=self.preset,
                terms=self.vocabulary,
                aliases=self.predicate_aliases,
                groups=self.exclusive_groups,
                single_valued=dict(self.single_valued),
            )
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None
        return self

    def vocabulary_model(self) -> Vocabulary:
        """The space's :class:`~pgrag_dag.vocabulary.Vocabulary`."""
        return Vocabulary.build(
            preset=self.preset,
            terms=self.vocabulary,
            aliases=self.predicate_aliases,
            groups=self.exclusive_groups,
            single_valued=dict(self.single_valued),
        )


class RealmSpec(BaseModel):
    """A realm: its spaces."""

    model_config = ConfigDict(extra="forbid")

    spaces: dict[str, SpaceSpec]


class LLMSettings(StrictModel):
    """Chat-model access through litellm (§3.5).

    ``models`` is the failover list, tried in order; the name ``replay`` serves only recorded
    responses from the cache. ``deadline_s`` bounds each call's retries in wall-clock seconds.
    """

    models: list[str] = Field(default_factory=lambda: ["replay"])
    api_base: str | None = None
    api_key: str | None = None
    temperature: float = Field(default=0.0, ge=0.0)
    max_tokens: int = Field(default=4096, ge=1)
    deadline_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    request_timeout_s: float = Field(default=60.0, gt=0)


class EmbeddingSettings(StrictModel):
    """Embedding model (§3.5, issue 12).

    ``model``: ``local/all-MiniLM-L6-v2`` (the default: real weights installed with the package, run
    in-process, no network), any litellm embedding model (``openai/text-embedding-3-small``, …), or
    ``hashing-sha256`` (the deterministic feature-hashing embedder: tests and large benchmarks only —
    it is far below BM25 on retrieval). ``dim`` its width, ``batch_size`` texts per request (per call of
    a local model, which runs each window as its own forward pass), ``deadline_s`` the wall-clock seconds
    one litellm batch (with its retries) may take before :class:`~pgrag_dag.errors.ModelError`,
    ``threads`` the local model's forward passes run at once, one thread each (0: one per core).
    ``bulk_load_rows``: a first load of at least this many vectors into a table with none builds its HNSW
    index and its secondary indexes once after them (:mod:`pgrag_dag.store.deferred_indexes`), with
    ``maintenance_work_mem`` = ``index_build_memory`` (issue 15, :mod:`pgrag_dag.store.bulk_index`; 0 never
    does): ``auto`` sizes it to the graph of the largest table, up to a quarter of this machine's memory
    (issue 30), or a size such as ``2GB``.

    Asymmetric models: ``query_prefix``/``passage_prefix`` are prepended to query/passage texts, and
    ``query_input_type``/``passage_input_type`` sent as the provider's ``input_type``; unset (``None``)
    takes the model's known convention (:func:`pgrag_dag.providers.embedding.convention_for`), ``""`` turns it
    off.

    ``fallback`` (issue 13, §3.5): ``none`` (the default) — when the model fails, the ``embeddings``
    stage keeps what it embedded and raises; ``hashing`` — rows the model refused are embedded by the
    SHA-256 hashing embedder instead, flagged per row, kept out of every vector search (its vectors are
    not comparable with the model's), reported, and re-embedded by the model on the next run
    (:mod:`pgrag_dag.pipeline.embeddings`).
    """

    model: str = "local/all-MiniLM-L6-v2"
    dim: int = Field(default=384, ge=1, le=16000)
    api_base: str | None = None
    api_key: str | None = None
    batch_size: int = Field(default=64, ge=1)
    bulk_load_rows: int = Field(default=20_000, ge=0)
    index_build_memory: str = Field(default="auto", pattern=r"^(auto|\d+\s*(kB|MB|GB))$")
    deadline_s: float = Field(default=120.0, gt=0)
    threads: int = Field(default=0, ge=0)
    query_prefix: str | None = None
    passage_prefix: str | None = None
    query_input_type: str | None = None
    passage_input_type: str | None = None
    fallback: Literal["none", "hashing"] = "none"


class ChunkingSettings(StrictModel):
    """Paragraph chunker (§4.1): character budget per chunk and characters of overlap."""

    chunk_chars: int = 2000
    overlap_chars: int = 200

    @model_validator(mode="after")
    def _check(self) -> ChunkingSettings:
        if self.chunk_chars < 200 or not 0 <= self.overlap_chars < self.chunk_chars // 2:
            raise ValueError("chunking: need chunk_chars >= 200 and 0 <= overlap_chars < chunk_chars/2")
        return self


class ModelExtractionSettings(StrictModel):
    """What the ``llm`` extractor reads (§3.4, §4.1–4.2): gleaning passes, document-context cap (names),
    concurrency (model calls in flight) and batch size (chunks whose calls run together; each batch sees the
    names found by earlier batches of its document; 1 = strictly sequential), the prompt's version. Its
    options — and so its identity: a change re-extracts — are exactly these fields."""

    gleaning_passes: int = Field(default=1, ge=0)
    context_names_cap: int = Field(default=40, ge=0)
    concurrency: int = Field(default=4, ge=1)
    batch_size: int = Field(default=8, ge=1)
    prompt_version: str = "extract-v2"


class ExtractionSettings(ModelExtractionSettings):
    """The ``extraction:`` section: the ``llm`` extractor's settings (:class:`ModelExtractionSettings`) and
    how a run that yields nothing is judged.

    ``allow_empty_runs`` (§3.5): a run whose chunks all came back with no entity and no triple, or whose
    every candidate a gate refused, raises :class:`~pgrag_dag.errors.ExtractionError` and writes nothing
    of that stage (judged on the chunks the run extracted or gated, not on the space); ``true`` lets such
    a run complete, its ``yield`` checks red — for corpora where that is expected. Per space:
    ``allow_empty_runs: true`` on the space. Not an extractor option: it changes no extraction."""

    allow_empty_runs: bool = False


class GateSettings(StrictModel):
    """Validation gates (§4.3, Table 2)."""

    confidence_floor: float = Field(default=0.5, ge=0.0, le=1.0)
    max_name_chars: int = Field(default=200, ge=1)
    possessive_gate: bool = False


class CommunitySettings(StrictModel):
    """Leiden communities and hierarchy (§6)."""

    min_size: int = Field(default=3, ge=2)
    levels: int = Field(default=1, ge=0)
    resolution: float = Field(default=1.0, gt=0)
    seed: int = 42
    negated_weight: float = Field(default=0.25, ge=0.0, le=1.0)
    report_deadline_s: float | None = Field(default=None, gt=0)
    """Wall-clock seconds one build may spend on model-written reports (unset: no limit); reports not in
    by then are skipped, named by their members, and owed to the next run."""
    max_reports: int | None = Field(default=None, ge=1)
    """A budget of model-written reports per build, spent on the largest clusters; the rest are skipped
    and named, not owed."""


class TemporalSettings(StrictModel):
    """The temporal model's optional parts (§7.4): LLM contradiction detection over the residue the
    declarative supersession pass leaves, off by default, at most ``contradiction_max_pairs`` calls."""

    contradiction_detection: bool = False
    contradiction_max_pairs: int = Field(default=200, ge=0)


class DagsterSettings(StrictModel):
    """How the code location runs: the source sensor and the refresh schedule (on by default), the
    schedule's cron (UTC), Dagster's instance storage (``postgres``: a database ``storage_database`` on
    the same PostgreSQL server as the graph, so runs, events and schedules survive and scale out; or
    ``sqlite`` files under the Dagster home), the limit of the ``llm`` pool that model-calling assets
    share across runs, and how many runs may run at once; run monitoring's ``run_start_timeout_s`` (a run
    not started by then fails) and ``run_timeout_s`` (a run going longer is failed; 0 = no limit);
    ``sensor_interval_s``, the least number of seconds between two evaluations of the source sensor and
    of the automation sensor (Dagster's daemon loops every 5 s, so lower values act as 5); ``executor``,
    how a run executes its steps: ``multiprocess`` (Dagster's default, a process per step) or
    ``in_process`` (every step in the run's process: no per-step start-up, for small spaces and one
    machine)."""

    sensors: bool = True
    refresh_cron: str = "0 3 * * *"
    instance_storage: Literal["postgres", "sqlite"] = "postgres"
    storage_database: str = "pgrag_dagster"
    llm_pool_limit: int = Field(default=2, ge=1)
    max_concurrent_runs: int = Field(default=4, ge=1)
    run_start_timeout_s: float = Field(default=180.0, gt=0)
    run_timeout_s: float = Field(default=0.0, ge=0)
    sensor_interval_s: int = Field(default=30, ge=1)
    executor: Literal["multiprocess", "in_process"] = "multiprocess"


class OperationsSettings(StrictModel):
    """How indexing runs behave around other runs and failures (issue 11).

    ``lock_wait_s``: seconds a stage waits for another run holding its partition before it is refused
    with :class:`~pgrag_dag.errors.PartitionBusyError` (0 = refuse at once). ``allow_empty``: allow a
    configuration that would remove every document of an indexed space (per space: ``allow_empty``
    on the space; on the command line ``--allow-empty``).
    """

    lock_wait_s: float = Field(default=120.0, ge=0)
    allow_empty: bool = False


class TelemetrySettings(StrictModel):
    """Read-side telemetry (§6.1 "Coverage"), off by default — ``telemetry:`` in ``pgrag.yaml`` or
    ``PGRAG_TELEMETRY__COVERAGE``. With ``coverage`` on, every query records one ``query_events`` row
    (the SHA-256 of its normalised question, never the text; its mode and space; the entity and community
    ids it returned; the database clock) through a background writer (:mod:`pgrag_dag.query.telemetry`) that
    holds at most ``queue_size`` events: a full queue drops events with a warning, never blocks a query,
    and a failed write is logged and swallowed (the one exception to fail-closed, §3.5)."""

    coverage: bool = False
    queue_size: int = Field(default=1000, ge=1)


class CypherSettings(StrictModel):
    """The bounds of every openCypher read (paper §2; issue 29; :mod:`pgrag_dag.cypher`) — ``cypher:`` in
    ``pgrag.yaml`` or ``PGRAG_CYPHER__<FIELD>``; ``pgrag cypher`` and ``QueryResource.cypher`` read them, and
    what a caller passes wins. ``max_hops``: the longest variable-length relationship compiled (``*1..N``; a
    longer one is refused before any SQL runs); ``max_rows``: the most rows one result may have (a longer
    one is refused: add ``LIMIT``); ``timeout_s``: the statement timeout of one read, seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_hops: int = Field(default=5, ge=0, le=20)
    max_rows: int = Field(default=10_000, ge=1)
    timeout_s: float = Field(default=10.0, gt=0)


def _default_export_formats() -> list[Literal["graphml", "parquet", "csv"]]:
    return ["graphml", "parquet"]


class ExportSettings(StrictModel):
    """Graph export and view (issue 16 items 7–8; :mod:`pgrag_dag.graph.export`, :mod:`pgrag_dag.graph.view`).
    ``asset``: add the optional Dagster asset ``graph_export`` (off by default), downstream of the
    community assets, writing ``formats`` (``graphml``, ``parquet``, ``csv``) under
    ``<data_dir>/exports/<partition>/``. ``view``: write the browser view
    ``<data_dir>/views/<partition>.html`` at every ``communities`` materialisation and link it from its
    metadata; ``view_max_nodes``: the view draws at most this many circles per drawing — the largest
    communities in its overview, the best-connected members in a community (the page says so)."""

    asset: bool = False
    formats: list[Literal["graphml", "parquet", "csv"]] = Field(
        default_factory=_default_export_formats, min_length=1
    )
    view: bool = True
    view_max_nodes: int = Field(default=400, ge=1)


class RetentionSettings(StrictModel):
    """Retention as demotion (§6.1): the importance score of a live entity is the weighted mean of four
    components, each normalised to 0..1 over the space — ``w_recency`` (its last retrieval, in the window
    of recorded events), ``w_frequency`` (events that returned it, log-scaled), ``w_degree`` (its live
    relations, log-scaled) and ``w_age`` (belief-time age inverted: 1 for the newest entity, so a new
    entity is not archived before it could be retrieved). ``archive_fraction`` of the live entities with
    the lowest score are archived (rounded down), only those scoring at most ``max_score`` when it is set.
    Needs coverage telemetry (:class:`TelemetrySettings`)."""

    w_recency: float = Field(default=0.35, ge=0)
    w_frequency: float = Field(default=0.35, ge=0)
    w_degree: float = Field(default=0.2, ge=0)
    w_age: float = Field(default=0.1, ge=0)
    archive_fraction: float = Field(default=0.1, ge=0, le=1)
    max_score: float | None = Field(default=None, ge=0, le=1)

    @model_validator(mode="after")
    def _some_weight(self) -> RetentionSettings:
        if self.w_recency + self.w_frequency + self.w_degree + self.w_age <= 0:
            raise ValueError("retention: at least one of w_recency, w_frequency, w_degree, w_age must be > 0")
        return self


class _RetrievalPreset(BaseModel):
    """Query defaults (§7): any :class:`~pgrag_dag.query_param.QueryParam` field but the per-question
    ``space``, ``as_of`` and ``as_believed_at`` — ``retrieval:`` in ``pgrag.yaml`` or
    ``PGRAG_RETRIEVAL__<FIELD>``. ``None`` (every default) keeps QueryParam's own default; the CLI,
    the query resource and the demo start from these, then apply what the caller passes. The fields are
    QueryParam's own (:func:`~pgrag_dag.query_param.setting_fields`), never declared here again.

    Raises (through :func:`pgrag_dag.config.load.load_settings`): :class:`ConfigurationError` for an
    unknown field or a value QueryParam refuses (e.g. ``mode: fancy``, ``mmr_lambda: 2``).
    """

    model_config = ConfigDict(extra="forbid")

    def preset(self) -> dict[str, Any]:
        """The fields set (not ``None``), as QueryParam keyword arguments."""
        return {k: v for k, v in self.model_dump().items() if v is not None}

    @model_validator(mode="after")
    def _valid_for_queries(self) -> Self:
        try:
            QueryParam(space="*", **self.preset())
        except QueryError as exc:
            raise ValueError(str(exc)) from None
        return self


if TYPE_CHECKING:

    class RetrievalSettings(_RetrievalPreset):
        """See :class:`_RetrievalPreset`; its fields are QueryParam's (made at import time)."""

        def __init__(self, **fields: Any) -> None: ...

else:
    RetrievalSettings = create_model(
        "RetrievalSettings",
        __base__=_RetrievalPreset,
        __doc__=_RetrievalPreset.__doc__,
        __module__=__name__,
        **{
            name: (kind | None, Field(default=None, description=text))
            for name, (kind, text) in setting_fields().items()
        },
    )


class Settings(BaseSettings):
    """All pgrag-dag settings; see the module docstring for precedence.

    Raises :class:`ConfigurationError` (via :func:`load_settings`) on invalid values.
    """

    model_config = SettingsConfigDict(env_prefix="PGRAG_", env_nested_delimiter="__", extra="forbid")

    database_url: str | None = None
    data_dir: Path = Path(".pgrag")
    config_dir: Path = Path(".")
    llm: LLMSettings = Field(default_factory=LLMSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    chunking: ChunkingSettings = Field(default_factory=ChunkingSettings)
    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)
    gates: GateSettings = Field(default_factory=GateSettings)
    communities: CommunitySettings = Field(default_factory=CommunitySettings)
    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    dagster: DagsterSettings = Field(default_factory=DagsterSettings)
    operations: OperationsSettings = Field(default_factory=OperationsSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    export: ExportSettings = Field(default_factory=ExportSettings)
    cypher: CypherSettings = Field(default_factory=CypherSettings)
    realms: dict[str, RealmSpec] = Field(default_factory=dict)
    cassettes: list[Path] = Field(default_factory=list)

    @field_validator("realms")
    @classmethod
    def _names(cls, realms: dict[str, RealmSpec]) -> dict[str, RealmSpec]:
        for realm, spec in realms.items():
            validate_realm(realm)
            for space in spec.spaces:
                validate_space(space)
        return realms

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = settings_cls.model_config.get("yaml_file")
        if path and Path(str(path)).is_file():
            sources.append(YamlConfigSettingsSource(settings_cls))
        return tuple(sources)

    def resolve(self, path: Path) -> Path:
        """Resolve a path from the configuration against ``config_dir``."""
        return path if path.is_absolute() else (self.config_dir / path).resolve()

    def partitions(self) -> list[str]:
        """Every ``"<realm>.<space>"`` partition key declared by the sources, sorted."""
        return sorted(partition_key(r, s) for r, spec in self.realms.items() for s in spec.spaces)

    def space_spec(self, realm: str, space: str) -> SpaceSpec:
        """The sources of one space; raises :class:`ConfigurationError` if it is not declared."""
        try:
            return self.realms[realm].spaces[space]
        except KeyError:
            declared = ", ".join(self.partitions()[:8]) or "none"
            raise ConfigurationError(
                f"no sources are declared for realm {realm!r} space {space!r}: space {realm}.{space} "
                f"is not in the configuration (declared: {declared})"
            ) from None
