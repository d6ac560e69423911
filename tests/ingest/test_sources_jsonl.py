"""JSONL sources, composite doc_keys and metadata document order (paper §5.2, §5.5, §8.11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgrag_dag.config import load_settings
from pgrag_dag.errors import ConfigurationError, SourceError
from pgrag_dag.ingest.sources import load_documents


def _settings(tmp_path: Path, space: str) -> object:
    cfg = tmp_path / "pgrag.yaml"
    cfg.write_text("realms:\n  r:\n    spaces:\n      s:\n" + space)
    return load_settings(cfg)


def test_jsonl_records_become_documents_keyed_by_url_else_title_made_composite_when_repeated(
    tmp_path: Path,
) -> None:
    (tmp_path / "news.jsonl").write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"title": "Earnings", "body": "Revenue rose.", "url": "https://example.org/a", "year": 2019},
                {"title": "Earnings", "body": "Revenue fell.", "year": 2018},
                {"title": "Earnings", "body": "Revenue flat.", "year": 2020},
                {"title": "Outlook", "body": "Guidance raised.", "year": 2017},
            ]
        )
        + "\n"
    )
    settings = _settings(
        tmp_path,
        "        order: metadata\n        order_field: year\n        sources:\n"
        "          - {path: news.jsonl, text_field: body, key_field: url, metadata_fields: [year]}\n",
    )
    docs = load_documents(settings, "r", "s")  # type: ignore[arg-type]
    assert docs["doc_key"].to_list() == [
        "Outlook",
        "Earnings#news.jsonl:2",
        "https://example.org/a",
        "Earnings#news.jsonl:3",
    ]
    assert docs["doc_order"].to_list() == [0, 1, 2, 3]  # ordered by fiscal year, not by line
    assert json.loads(docs["metadata"][0]) == {"year": 2017, "line": 4}


def test_a_bad_jsonl_line_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"title": "A", "text": "ok"}\n{"title": "B"}\n')
    settings = _settings(tmp_path, "        sources:\n          - {path: bad.jsonl}\n")
    with pytest.raises(SourceError, match=r"bad\.jsonl:2: has no text in field 'text'"):
        load_documents(settings, "r", "s")  # type: ignore[arg-type]


def test_metadata_order_needs_its_field_on_every_document(tmp_path: Path) -> None:
    (tmp_path / "n.jsonl").write_text('{"title": "A", "text": "x", "year": 1}\n{"title": "B", "text": "y"}\n')
    settings = _settings(
        tmp_path,
        "        order: metadata\n        order_field: year\n        sources:\n"
        "          - {path: n.jsonl, metadata_fields: [year]}\n",
    )
    with pytest.raises(ConfigurationError, match="order_field 'year' is missing"):
        load_documents(settings, "r", "s")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="needs order_field"):
        _settings(tmp_path, "        order: metadata\n        sources: [{path: n.jsonl}]\n")
