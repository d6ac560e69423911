"""One error root for pgrag-dag; every subclass is one fail-closed case (paper §3.5).

::

    PgragError
    ├── ConfigurationError        invalid settings or sources (unknown preset, missing path, ...)
    │   └── InvalidNameError      a realm or space name that may not reach SQL
    ├── DatabaseError             PostgreSQL unreachable, lacking pgvector, or a statement it refused
    │   ├── SchemaMismatchError   embedding column missing or of the wrong width; model mixing
    │   └── PartitionBusyError    another run holds the partition a stage must write
    ├── SourceError               a document source that cannot be read (binary, unreadable, empty)
    ├── ModelError                a chat/embedding call that failed on every model before its deadline
    │   └── ReplayMissError       the ``replay`` model has no recorded response for a prompt
    ├── ExtractionError           every chunk of a run failed extraction or was refused by the gates
    ├── ContractError             a stage frame broke its Pandera contract
    ├── OperatorError             a composed operator raised (its name and space in the message)
    └── QueryError                an invalid query (unknown mode, wildcard space on write, ...)
"""

from __future__ import annotations


class PgragError(Exception):
    """Root of every error raised by pgrag-dag."""


class ConfigurationError(PgragError):
    """Settings or document sources are invalid; the message names the offending field."""


class InvalidNameError(ConfigurationError):
    """A realm or space name was rejected before it could reach SQL text.

    Attributes:
        kind: ``"realm"`` or ``"space"``.
        value: the rejected name, verbatim.
    """

    def __init__(self, kind: str, value: str, reason: str) -> None:
        self.kind = kind
        self.value = value
        super().__init__(f"invalid {kind} name {value!r}: {reason}")


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
        super().__init__(f"partition {partition} is being written by another run ({holder}); waited {waited_s:g} s "
                         "(operations.lock_wait_s) — rerun when it has finished")


class SchemaMismatchError(DatabaseError):
    """An embedding column is missing or its width differs from the realm's model (§3.5).

    Attributes:
        table: what was checked (a qualified column, or a realm's embedding registration).
        expected: what the realm requires (its registered model and width, or the column's type).
        found: what was found or configured instead; ``None`` when the column is missing.
    """

    def __init__(self, table: str, expected: int | str, found: int | str | None, detail: str = "") -> None:
        self.table = table
        self.expected = expected
        self.found = found
        msg = f"{table}: expected {expected}, found {found}"
        super().__init__(msg + (f" ({detail})" if detail else ""))


class SourceError(PgragError):
    """A document could not be read or is empty; ``path`` names it (a file, or ``file:line``), ``reason`` says why."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"document {path}: {reason}")


class ModelError(PgragError):
    """A model call failed on every model of the failover list within its wall-clock deadline."""


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


class ExtractionError(PgragError):
    """Every chunk of a run failed extraction or was refused by the gates (§3.5)."""


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


class QueryError(PgragError):
    """A query that cannot be answered as asked (unknown mode, bad parameter)."""
