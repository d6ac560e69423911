"""``pgrag demo`` and ``pgrag index``: the demo corpus, and indexing one space with progress and a summary."""

from __future__ import annotations

import contextlib
import json
import shlex
import signal
import threading
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from pgrag_dag.cli.common import app, fail, only_space
from pgrag_dag.errors import PgragError


@app.command()
def demo() -> None:
    """Materialise every asset of each configured partition through Dagster, then query it. A partition
    whose run fails is reported in one line (the stack trace in a log file) and the others go on; the exit
    status is 1 when any failed."""
    from pgrag_dag.assets.demo import run_demo
    from pgrag_dag.config.load import require_configuration

    try:
        require_configuration()
        failed = run_demo()
    except PgragError as exc:
        fail(exc)
    if failed:
        raise typer.Exit(1)


def _without_vector(engine: Any, realm: str, space: str) -> str:
    """``"1,204 chunks and 31 relations"``: the rows of ``realm.space`` no vector search finds yet, after an
    interrupt (the vectors an interrupted embeddings stage wrote are kept); ``""`` when none are, or when the
    database cannot say (the interrupt is reported all the same)."""
    from pgrag_dag.pipeline.embeddings import describe
    from pgrag_dag.store import vectors

    try:
        with engine.connect() as conn:
            return describe({t: c["missing"] for t, c in vectors.unembedded(conn, realm, space).items()})
    except Exception:  # noqa: BLE001 - a failing count must not hide the interrupt's message
        return ""


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a service manager stopping the run) as :func:`index` receives it: raised in the main
    thread where Ctrl-C raises :class:`KeyboardInterrupt` (a subclass of it, so the stages unwind alike) and
    reported alike; ``signum`` gives the exit status, ``128 + signum`` (143)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def terminated_as_interrupt() -> Iterator[list[int]]:
    """Inside the block, SIGTERM raises :class:`Terminated` in the main thread, once: a second SIGTERM (while
    the interrupt is reported) is handled as before the block (by default it ends the process). The
    handler before the block is restored after it. Outside the main thread (where Python cannot set a
    handler) the block runs unchanged.

    Yields the signals received (SIGTERM's number, once it came): code the signal lands in may raise an
    error of its own in place of :class:`Terminated` — onnxruntime's import, cut short, raises
    ``ImportError: initialization failed`` (a new user's trial) — and the caller still reports an
    interrupt."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    before = signal.getsignal(signal.SIGTERM)
    restore = signal.SIG_DFL if before is None else before  # None: a handler not set from Python

    def raise_terminated(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, restore)
        received.append(signum)
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, restore)


def _interrupted(engine: Any, realm: str, space: str, stage: str | None) -> str:
    """The line an interrupted :func:`index` prints: the ``stage`` that was running (``None`` between two),
    what is kept, the rows without a vector (:func:`_without_vector`) and the command that goes on. An
    interrupted ``raw_extractions`` keeps none of its run's extractions — they are written together at the
    stage's end, once its checks pass over every batch — but the model's responses are cached, so the
    rerun does not ask for them again (said only when the space's extractor calls a model)."""
    from pgrag_dag.pipeline.composition import compose

    left = _without_vector(engine, realm, space)
    command = f"`pgrag index {shlex.quote(f'{realm}.{space}')}`"
    said = [f"interrupted{f' during {stage}' if stage else ''}: the stages that had finished are kept"]
    if stage == "raw_extractions":
        try:
            model = compose(engine.settings, realm, space).extractor.op.calls_model
        except PgragError:
            model = False
        said.append(
            "the chunks this run had extracted are not (raw_extractions writes a run's extractions together "
            "when it ends, once its checks have passed over every batch)"
        )
        if model:
            said.append(
                "the model's responses already received are cached: the rerun does not pay for them again"
            )
    if left:
        said.append(f"{left} still without a vector")
    said.append(
        f"{command} goes on from there"
        + ("" if stage == "raw_extractions" else " (the interrupted stage redoes what it had not committed)")
    )
    return "; ".join(said)


@app.command()
def index(
    partition: Annotated[
        str | None,
        typer.Argument(
            help="<realm>.<space>: the space as in pgrag.yaml (quote it "
            "if it has blanks), or its Dagster partition key; may be left out when the configuration "
            "declares one space"
        ),
    ] = None,
    allow_empty: Annotated[
        bool,
        typer.Option(
            "--allow-empty",
            help="allow sources that name no document to remove every document of an indexed space",
        ),
    ] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="read and hash every source file and recompute the gate decisions, entities, relations "
            "and vector audit over the whole space, not only what changed (same result)",
        ),
    ] = False,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="read and hash every source file, even those whose size, modification time and inode "
            "are unchanged since the last run (which are otherwise trusted unread)",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="print every stage's metadata and the checks as one JSON document instead of the summary",
        ),
    ] = False,
) -> None:
    """Run the eight stages for one partition as a plain pipeline (no Dagster), with a progress bar per
    stage on stderr, then print the summary. Each stage works on what changed since its last run; ``--full``
    recomputes the whole space; ``--verify`` reads every source file (an edit that kept a file's size,
    modification time and inode is otherwise not seen). A failed stage is one line on stderr (exit 2), its
    stack trace in ``<data_dir>/logs/pgrag-errors.log``. Ctrl-C or SIGTERM stops the run with one line below
    the bars: the stage that was running, what is kept, what has no vector yet and the command that goes on
    (exit 130 for Ctrl-C, 143 for SIGTERM)."""
    import os

    from rich.console import Console

    from pgrag_dag.cli import progress as cli_progress
    from pgrag_dag.config.load import load_settings
    from pgrag_dag.engine import Engine
    from pgrag_dag.names import parse_partition
    from pgrag_dag.operate.summary import stage_metas, summarise
    from pgrag_dag.pipeline.run import index_documents
    from pgrag_dag.providers.embedding import model_warning

    if allow_empty:
        os.environ["PGRAG_OPERATIONS__ALLOW_EMPTY"] = "true"
    console = Console(stderr=True)
    try:
        settings = load_settings(required=True)
        realm, space = parse_partition(
            partition or only_space(settings),
            [(r, s) for r, spec in settings.realms.items() for s in spec.spaces],
        )
        settings.space_spec(realm, space)  # a misspelt space is refused here, before the database is opened
        with (
            contextlib.closing(Engine.from_settings(settings)) as engine,
            cli_progress.watching(console) as (display, once),
        ):
            if warning := model_warning(settings.embedding.model):
                once.say(warning)
            engine.import_cassettes()
            received: list[int] = []

            def interrupted(status: int) -> typer.Exit:
                display.close()  # the bars' last frame first: the message goes below it
                stage = display.failed[0] if display.failed else None
                console.print(
                    _interrupted(engine, realm, space, stage), markup=False, highlight=False, soft_wrap=True
                )
                return typer.Exit(status)

            try:
                with terminated_as_interrupt() as received:
                    results = index_documents(engine, realm, space, full=full, verify=verify)
            except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: said, not silent, with what is kept
                raise interrupted(128 + exc.signum if isinstance(exc, Terminated) else 130) from None
            except Exception as exc:  # one line; the trace to the log file
                if received:  # SIGTERM came and the code it landed in raised an error of its own instead
                    raise interrupted(128 + received[0]) from None
                display.close()
                where = cli_progress.run_failure_where(exc, display, f"{realm}.{space}")
                cli_progress.report_failure(console, settings.resolve(settings.data_dir), exc, where)
                raise typer.Exit(2) from None
            for r in results:  # a red check is said once, plainly, with what to do; a warning with its fix
                for name, (ok, meta) in r.checks.items():
                    if not ok:
                        said = (
                            meta.get("reason") or "; ".join(meta.get("blocking") or []) or _check_facts(meta)
                        )
                        once.say(f"check {r.stage}:{name} failed: {said}")
                    for warning in meta.get("warnings") or []:
                        once.say(f"{r.stage}:{name}: {warning}")
    except PgragError as exc:
        fail(exc)
    metas = stage_metas(results)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "partition": f"{realm}.{space}",
                    "stages": {r.stage: r.metadata for r in results},
                    "checks": metas["_checks"],
                    "graph_quality": metas["_quality"],
                },
                default=str,
                indent=2,
            )
        )
    else:
        typer.echo("\n".join(summarise(f"{realm}.{space}", metas)))


def _check_facts(meta: dict[str, Any]) -> str:
    """A failed check's metadata for people: ``key value`` pairs in the check's order, empty ones left out
    (``documents_skipped 3; skipped ["a.pdf: not UTF-8 text", ...]``)."""
    return (
        "; ".join(
            f"{k} {v if isinstance(v, (int, float, str)) else json.dumps(v, default=str, ensure_ascii=False)}"
            for k, v in meta.items()
            if v not in (None, "", [], {})
        )
        or "(no details)"
    )
