"""The built-in operators under their stable names (a static table, read by
:mod:`pgrag_dag.pipeline.composition`).

======================  =========  ==============================================================
name                    slot       what it does
======================  =========  ==============================================================
``paragraph_pack``      chunker    paragraphs packed up to ``chunk_chars`` with a sentence-aligned
                                   overlap (§4.1; the default, options from ``chunking:``)
``token_window``        chunker    fixed windows of ``tokens`` tokens with ``overlap_tokens`` overlap
``markdown_heading``    chunker    one section per chunk (Markdown ``#`` / MediaWiki ``==`` headings),
                                   the heading path kept as ``section`` metadata
``paragraph``           chunker    one chunk per paragraph
``llm``                 extractor  model extraction with gleaning and document context (§4.1–4.2;
                                   the default, options from ``extraction:``)
``cooccurrence``        extractor  no model: proper-noun-phrase entities, sentence co-occurrence edges
``nlp``                 extractor  no model: a shipped spaCy pipeline's typed entities, and relations from
                                   its dependency parse (predicates, negation, validity)
``name_stoplist``       gate       refuses entities (and triples) named in ``names``
``type_map``            enricher   renames entity types (``mapping``: from → to, case-insensitive)
======================  =========  ==============================================================
"""

from __future__ import annotations

import hashlib
from typing import Any, cast

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from pgrag_dag.config.sections import ChunkingSettings, ModelExtractionSettings
from pgrag_dag.extract.cooccurrence import CooccurrenceOptions, extract_cooccurrence
from pgrag_dag.extract.model_extraction import extract_chunks, reparse_extraction
from pgrag_dag.extract.nlp import extract_nlp
from pgrag_dag.extract.nlp_pipeline import NlpOptions, model_version
from pgrag_dag.gate_rules import identity_key
from pgrag_dag.ingest.chunkers import (
    MarkdownHeadingOptions,
    ParagraphOptions,
    TokenWindowOptions,
    markdown_heading_chunks,
    paragraph_chunks,
    paragraph_pack_chunks,
    token_window_chunks,
)
from pgrag_dag.operators.core import Operator, OperatorContext


class ParagraphPackOptions(ChunkingSettings):
    """``paragraph_pack`` options: ``chunk_chars`` (characters per chunk, ≥ 200) and ``overlap_chars``
    (characters carried into the next chunk, < chunk_chars / 2)."""

    model_config = ConfigDict(extra="forbid")


def _paragraph_pack(
    documents: pl.DataFrame, options: ParagraphPackOptions, ctx: OperatorContext
) -> pl.DataFrame:
    return paragraph_pack_chunks(
        documents, chunk_chars=options.chunk_chars, overlap_chars=options.overlap_chars
    )


def _plain(fn: Any) -> Any:
    def call(frame: pl.DataFrame, options: BaseModel, ctx: OperatorContext) -> pl.DataFrame:
        return fn(frame, options)

    return call


class LLMExtractionOptions(ModelExtractionSettings):
    """``llm`` extractor options — the global ``extraction:`` section's fields (gleaning_passes,
    context_names_cap, concurrency, batch_size, prompt_version), overridable per space."""

    model_config = ConfigDict(extra="forbid")


def _llm(chunks: pl.DataFrame, options: LLMExtractionOptions, ctx: OperatorContext) -> pl.DataFrame:
    assert ctx.client is not None, "the llm extractor is declared calls_model; the stage injects the client"
    return extract_chunks(
        chunks,
        ctx.client,
        options,
        vocabulary=ctx.vocabulary,
        context=ctx.state.get("document_context"),
        completed=ctx.state.get("completed"),
        all_failed_raises=ctx.state.get("all_failed_raises", True),
    )


def _cooccurrence(chunks: pl.DataFrame, options: CooccurrenceOptions, ctx: OperatorContext) -> pl.DataFrame:
    return extract_cooccurrence(chunks, options, version=ctx.state["identity"])


def _nlp(chunks: pl.DataFrame, options: NlpOptions, ctx: OperatorContext) -> pl.DataFrame:
    return extract_nlp(chunks, options, version=ctx.state["identity"], vocabulary=ctx.vocabulary)


def _nlp_identity(options: BaseModel) -> str:
    # the pipeline's version is part of what was extracted: another model release re-extracts once
    opts = cast(NlpOptions, options)
    what = opts.model_dump_json(exclude={"batch_size", "n_process"})  # how fast, not what is extracted
    digest = hashlib.sha256(what.encode()).hexdigest()[:12]
    return f"nlp@{NLP_VERSION}:{model_version(opts.model)}:{digest}"


NLP_VERSION = "3"
"""3: short names used alone are not absorbed into longer ones, title nouns are aliases, all-caps speaker
labels take the call's own spelling, curly apostrophes read as straight, Gutenberg boilerplate and stage
directions blanked, questions assert nothing, French honorifics (Mme., Mlle., MM.) end no sentence, no name
ends in a conjunction (spaces extracted with 2 extract again once)."""


class StoplistOptions(BaseModel):
    """``name_stoplist`` options: ``names`` compared by identity (case, quotes and spacing ignored)."""

    model_config = ConfigDict(extra="forbid")

    names: list[str] = Field(min_length=1)


def _stoplist(decisions: pl.DataFrame, options: StoplistOptions, ctx: OperatorContext) -> pl.DataFrame:
    stop = {identity_key(n) for n in options.names}

    def hit(r: dict[str, Any]) -> str | None:
        names = [r["name"]] if r["kind"] == "entity" else [r["subject"], r["object"]]
        return next((n for n in names if n and identity_key(n) in stop), None)

    values = [hit(r) for r in decisions.iter_rows(named=True)]
    return pl.DataFrame(
        {"refused": [v is not None for v in values], "offending_value": values},
        schema={"refused": pl.Boolean, "offending_value": pl.String},
    )


class TypeMapOptions(BaseModel):
    """``type_map`` options: ``mapping`` from an entity type (case-insensitive) to the type to store."""

    model_config = ConfigDict(extra="forbid")

    mapping: dict[str, str] = Field(min_length=1)


def _type_map(entities: pl.DataFrame, options: TypeMapOptions, ctx: OperatorContext) -> pl.DataFrame:
    low = {k.lower(): v for k, v in options.mapping.items()}
    return entities.with_columns(
        pl.col("entity_type").map_elements(lambda t: low.get(t.lower(), t), return_dtype=pl.String)
    )


BUILTINS: dict[str, Operator] = {
    op.name: op
    for op in (
        Operator(
            "paragraph_pack",
            "chunker",
            _paragraph_pack,
            ParagraphPackOptions,
            "Paragraphs packed up to chunk_chars characters, sentence-aligned overlap of overlap_chars "
            "(§4.1).",
            defaults=lambda s: s.chunking.model_dump(),
        ),
        Operator(
            "token_window",
            "chunker",
            _plain(token_window_chunks),
            TokenWindowOptions,
            "Fixed windows of `tokens` tokens (litellm's tokenizer) overlapping by `overlap_tokens`.",
        ),
        Operator(
            "markdown_heading",
            "chunker",
            _plain(markdown_heading_chunks),
            MarkdownHeadingOptions,
            "One chunk per Markdown/MediaWiki section (long ones split at paragraphs); the heading path is "
            "kept as `section` metadata.",
        ),
        Operator(
            "paragraph", "chunker", _plain(paragraph_chunks), ParagraphOptions, "One chunk per paragraph."
        ),
        Operator(
            "llm",
            "extractor",
            _llm,
            LLMExtractionOptions,
            "Model extraction with gleaning, the document's names threaded through its chunks (§4.1–4.2).",
            calls_model=True,
            defaults=lambda s: s.extraction.model_dump(include=set(ModelExtractionSettings.model_fields)),
            identity=lambda o: cast(LLMExtractionOptions, o).prompt_version,
            reparse=reparse_extraction,
        ),
        Operator(
            "cooccurrence",
            "extractor",
            _cooccurrence,
            CooccurrenceOptions,
            "No model: proper-noun-phrase entities and one edge per pair named in one sentence, weighted "
            "by the chunks it occurs in.",
            version="3",
        ),  # 2: modal verbs, interjections, "Well", "See" opening a sentence; a double-hyphen dash; 3: a
        # short name used alone stays its own; boilerplate and stage directions blanked; curly apostrophes
        Operator(
            "nlp",
            "extractor",
            _nlp,
            NlpOptions,
            "No model: a shipped spaCy pipeline's typed entities, and relations from its dependency parse "
            "(verb and role patterns, negation, dates as validity).",
            version=NLP_VERSION,
            identity=_nlp_identity,
        ),
        Operator(
            "name_stoplist",
            "gate",
            _stoplist,
            StoplistOptions,
            "Refuses entities and triples named in `names`.",
        ),
        Operator("type_map", "enricher", _type_map, TypeMapOptions, "Renames entity types by `mapping`."),
    )
}
"""The built-in operators by their stable name (the table above)."""
