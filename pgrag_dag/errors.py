"""One error root for pgrag-dag; every subclass is one fail-closed case (paper §3.5).

::

    PgragError
    ├── ConfigurationError        invalid settings or sources (unknown preset, missing path, ...)
    │   └── InvalidNameError      an invalid realm, space or partition-key name
    ├── DatabaseError             PostgreSQL unreachable, lacking pgvector, or a statement it refused
    │   ├── SchemaMismatchError   embedding column missing or of the wrong width; model mixing
    │   └── PartitionBusyError    another run holds the partition a stage must write
    ├── SourceError               a document source that cannot be read (binary, unreadable, empty)
    ├── ExportError               an export or graph view that cannot be written where it was asked
    ├── ModelError                a chat/embedding call that failed on every model before its deadline
    │   ├── ReplayMissError       the ``replay`` model has no recorded response for a prompt
    │   ├── ModelAccessError      a model refused its configuration (key, access, name): not retried
    │   ├── StreamInterruptedError  a streamed answer broke after text was shown: not retried
    │   └── EmbeddingIncompleteError  the embedding model failed; rows are left without a vector
    ├── ExtractionError           every chunk of a run failed, came back empty or was refused by the gates
    ├── ContractError             a stage frame broke its Pandera contract
    ├── OperatorError             a composed operator raised (its name and space in the message)
    ├── DeletionRefusedError      an explicit deletion the next run would silently undo
    ├── RunFailedError            a Dagster run of a partition failed (its steps and causes)
    └── QueryError                an invalid query (unknown mode, wildcard space on write, ...)
        └── CypherError           a Cypher text refused before any SQL ran (clause, line:column)
"""

from __future__ import annotations


class PgragError(Exception):
    """Root of every error raised by pgrag-dag."""


class RunFailedError(PgragError):
    """A Dagster run materialising a partition failed.

    Attributes:
        partition: the partition key (``"<realm>.<space>"``).
        run_id: the Dagster run's id.
        reasons: one ``"<step key>: <cause>"`` per failed step (never empty).
        details: the failed steps' stack traces, as Dagster recorded them (for a log file).
    """

    def __init__(self, partition: str, run_id: str, reasons: list[str], details: str) -> None:
        super().__init__(f"Dagster run {run_id} for {partition} failed: " + " | ".join(reasons))
        self.partition, self.run_id, self.reasons, self.details = partition, run_id, reasons, details


class ConfigurationError(PgragError):
    """Settings or document sources are invalid; the message names the offending field."""


class InvalidNameError(ConfigurationError):
    """A realm, space or partition-key name was rejected before it could reach SQL text or Dagster
    (:mod:`pgrag_dag.names`).

    Attributes:
        kind: ``"realm"``, ``"space"`` or ``"partition"``.
        value: the rejected name, verbatim.
    """

    def __init__(self, kind: str, value: str, reason: str) -> None:
        self.kind = kind
        self.value = value
        shown = repr(value) if len(value) <= 80 else repr(value[:80]) + "…"  # one readable line
        super().__init__(f"invalid {kind} name {shown}: {reason}")


class DatabaseError(PgragError):
    """PostgreSQL is unreachable, lacks the pgvector extension, or refused a statement (a deadlock, a
    lock or statement timeout, a constraint); the message names the server or the statement's error."""


class PartitionBusyError(DatabaseError):
    """Another run holds the realm/space partition a stage must write, past the configured wait.

    Attributes:
        partition: ``"<realm>.<space>"``.
        holder: who holds it (PostgreSQL backend pid, application name, since when), as known.
    """

    def __init__(self, partition: str, holder: str, waited_s: float) -> None:
        self.partition = partition
        self.holder = holder
        super().__init__(
            f"partition {partition} is being written by another run ({holder}); waited {waited_s:g} s "
            "(operations.lock_wait_s) — rerun when it has finished"
        )


class SchemaMismatchError(DatabaseError):
    """An embedding column is missing or its width differs from the realm's model (§3.5).

    Attributes:
        table: what was checked (a qualified column, or a realm's embedding registration).
        expected: what the realm requires (its registered model and width, or the column's type).
        found: what was found or configured instead; ``None`` when the column is missing.
    """

    def __init__(
        self,
        table: str,
        expected: int | str,
        found: int | str | None,
        detail: str = "",
        *,
        message: str | None = None,
    ) -> None:
        self.table = table
        self.expected = expected
        self.found = found
        msg = f"{table}: expected {expected}, found {found}" + (f" ({detail})" if detail else "")
        super().__init__(message or msg)


class SourceError(PgragError):
    """A document could not be read or is empty; ``path`` names it (a file, or ``file:line``), ``reason`` says
    why."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"document {path}: {reason}")


class ExportError(PgragError):
    """A graph export or view (:mod:`pgrag_dag.graph.export`, :mod:`pgrag_dag.graph.view`) that cannot be
    written: its target's parent directory is missing, or a path is not writable; the message names the
    path."""


class ModelError(PgragError):
    """A model call failed on every model of the failover list within its wall-clock deadline."""


class ModelAccessError(ModelError):
    """A model refused its configuration — no or a refused API key, no access, an unknown model or
    provider — so that every call of it would fail (issue 13 item 10): not retried, and not called
    again by the same client. The message is one line naming the model and the setting or environment
    variable to fix (:mod:`pgrag_dag.providers.model_errors`).

    Attributes:
        models: the refused models, in failover order.
    """

    def __init__(self, message: str, models: tuple[str, ...] = ()) -> None:
        self.models = models
        super().__init__(message)


class EmbeddingIncompleteError(ModelError):
    """The embedding model failed during the ``embeddings`` stage (issue 13 item 9): what it embedded
    was written, and the rows left without a vector are counted; the stage's next run embeds them.

    Attributes:
        pending: the ``pending_work`` check's metadata — ``pending`` (rows without a vector),
            ``without_vector`` and ``fallback_only`` per table, ``model_error``.
    """

    def __init__(self, message: str, pending: dict[str, object]) -> None:
        self.pending = pending
        super().__init__(message)


class ReplayMissError(ModelError):
    """The ``replay`` model was asked a prompt it has no recorded response for.

    Attributes:
        prompt_key: SHA-256 of the (messages, parameters) that missed.
        purpose: what the call was for (``extract``, ``glean``, ``community_report``, ...).
    """

    def __init__(self, prompt_key: str, purpose: str, hint: str = "") -> None:
        self.prompt_key = prompt_key
        self.purpose = purpose
        super().__init__(
            f"replay miss for {purpose} prompt {prompt_key[:16]}: no recorded response in the cache"
            + (f" ({hint})" if hint else "")
        )


class StreamInterruptedError(ModelError):
    """A streamed answer (``ModelClient.complete(..., on_text=...)``) broke after part of its text was
    shown: not retried and not failed over (the text shown cannot be taken back); nothing was cached."""


class ExtractionError(PgragError):
    """A run extracted nothing usable (§3.5): every chunk it extracted failed or came back with no entity
    and no triple, or the gates refused every candidate of the chunks it gated — judged on the run's own
    chunks, not the space's; the message names the counts (per gate) and the opt-out
    (``extraction.allow_empty_runs``). Also an offline extractor's malformed chunks frame."""


class ContractError(PgragError):
    """A stage frame broke its Pandera contract; ``failure_cases`` holds the offending rows."""

    def __init__(self, contract: str, message: str, failure_cases: object = None) -> None:
        self.contract = contract
        self.failure_cases = failure_cases
        super().__init__(f"{contract}: {message}")


class OperatorError(PgragError):
    """A composed operator (:mod:`pgrag_dag.operators`) raised; the stage wrote nothing.

    Attributes:
        operator: the operator's name.
    """

    def __init__(self, operator: str, where: str, cause: BaseException) -> None:
        self.operator = operator
        super().__init__(f"operator {operator!r} ({where}) raised {type(cause).__name__}: {cause}")


class DeletionRefusedError(PgragError):
    """An explicit deletion was refused because the next run would undo it (an entity that chunks still
    mention would be re-created, issue 14 item 4); nothing was removed.

    Attributes:
        target: what was to be deleted (e.g. ``entity 'Ada Lovelace'``).
        doc_keys: up to five documents that still mention it.
        documents: how many documents mention it in all.
    """

    def __init__(self, target: str, doc_keys: list[str], documents: int, hint: str) -> None:
        self.target = target
        self.doc_keys = doc_keys
        self.documents = documents
        more = f" and {documents - len(doc_keys)} more" if documents > len(doc_keys) else ""
        super().__init__(
            f"cannot delete {target}: {documents} document(s) still mention it "
            f"({', '.join(map(repr, doc_keys))}{more}); {hint}"
        )


class QueryError(PgragError):
    """A query that cannot be answered as asked (unknown mode, bad parameter)."""


class UnknownSpaceError(QueryError):
    """A space of a realm with neither history nor chunks: never indexed, mistyped, or deleted."""


class CypherError(QueryError):
    """A Cypher text the read-only subset refuses (:mod:`pgrag_dag.cypher`, issue 29), before any SQL ran:
    a writing or procedural clause, a syntax error, an unknown property key or function, an unbounded or
    too long variable-length relationship, a missing parameter.

    Attributes:
        clause: what was refused (``"CREATE"``, ``"DETACH DELETE"``, ``"unbounded *"``, ``"syntax"``, …).
        line: 1-based line of the refused text (0 when it has no position, e.g. a missing parameter).
        column: 1-based column.
    """

    def __init__(self, clause: str, reason: str, line: int = 0, column: int = 0) -> None:
        self.clause, self.line, self.column = clause, line, column
        where = f" at {line}:{column}" if line else ""
        super().__init__(f"Cypher {reason}{where}")
