"""The README's "Write your own operator" examples, loaded by import path in the tests
(``tests.user_operators:full_names``, ``tests.user_operators:sentence_chunker``), and two
operators that break their contracts on purpose."""

from __future__ import annotations

import polars as pl
from pydantic import BaseModel, Field

from pgrag_dag.ingest.splitting import split_sentences
from pgrag_dag.operators import OperatorContext, operator


# -- a house gate ---------------------------------------------------------------------------------
class FullNamesOptions(BaseModel):
    keep_types: list[str] = ["Place"]


@operator("full_names", "gate", options=FullNamesOptions)
def full_names(decisions: pl.DataFrame, options: FullNamesOptions, ctx: OperatorContext) -> pl.DataFrame:
    """Refuses one-word entity names ("Babbage") except for places: our house style wants full names."""
    refused = (
        (decisions["kind"] == "entity")
        & ~decisions["entity_type"].is_in(options.keep_types)
        & (decisions["name"].str.split(" ").list.len() == 1)
    )
    return pl.DataFrame({"refused": refused.fill_null(False), "offending_value": decisions["name"]})


# -- a chunker ------------------------------------------------------------------------------------
class SentenceOptions(BaseModel):
    per_chunk: int = Field(default=2, ge=1)


@operator("sentence_chunker", "chunker", options=SentenceOptions)
def sentence_chunker(documents: pl.DataFrame, options: SentenceOptions, ctx: OperatorContext) -> pl.DataFrame:
    """One chunk per run of `per_chunk` sentences."""
    rows = []
    for doc_key, text in documents.select("doc_key", "text").iter_rows():
        sentences = split_sentences(text)
        for i in range(0, len(sentences), options.per_chunk):
            rows.append(
                (doc_key, i // options.per_chunk, " ".join(sentences[i : i + options.per_chunk]), None)
            )
    return pl.DataFrame(
        rows,
        orient="row",
        schema={"doc_key": pl.String, "chunk_index": pl.Int64, "text": pl.String, "metadata": pl.String},
    )


# -- operators that break their contracts -------------------------------------------------------
@operator("blank_chunker", "chunker")
def blank_chunker(documents: pl.DataFrame, options: BaseModel, ctx: OperatorContext) -> pl.DataFrame:
    """Emits a whitespace-only chunk after every document's text (a bug the contract must catch)."""
    keys = documents["doc_key"].to_list()
    return pl.DataFrame(
        {
            "doc_key": keys + keys,
            "chunk_index": [0] * len(keys) + [1] * len(keys),
            "text": documents["text"].to_list() + ["   "] * len(keys),
            "metadata": [None] * (2 * len(keys)),
        },
        schema={"doc_key": pl.String, "chunk_index": pl.Int64, "text": pl.String, "metadata": pl.String},
    )


@operator("renaming_enricher", "enricher")
def renaming_enricher(entities: pl.DataFrame, options: BaseModel, ctx: OperatorContext) -> pl.DataFrame:
    """Upper-cases canonical names (identity belongs to resolution: the stage must refuse this)."""
    return entities.with_columns(pl.col("name").str.to_uppercase())


not_an_operator = "just a string"
