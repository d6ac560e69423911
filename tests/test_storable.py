"""pgrag_dag.storable: strings PostgreSQL can store — no NUL, no lone surrogate (issue 13)."""

from __future__ import annotations

import json

import pytest

from pgrag_dag.storable import (
    clean_json,
    clean_key,
    clean_text,
    escape_unstorable,
    has_lone_surrogate,
    unstorable,
)


@pytest.mark.parametrize(
    "text", ["plain", "李白 محمد 👩\u200d🔬", "a\x00b", "x\ud800y", '{"name": "Ada\x00\udfff"}']
)
def test_escaped_model_text_is_ascii_safe_and_a_json_parser_reads_it_back_unchanged(text: str) -> None:
    escaped = escape_unstorable(text)
    escaped.encode("utf-8")  # storable
    assert "\x00" not in escaped and not has_lone_surrogate(escaped)
    assert (
        json.loads(escape_unstorable(json.dumps(text, ensure_ascii=False))) == text
    )  # as a model's JSON carries it
    assert (
        json.loads(escape_unstorable('"' + text.replace('"', '\\"') + '"')) == text
    )  # raw characters in a string


def test_clean_text_removes_nul_replaces_lone_surrogates_and_says_so() -> None:
    assert clean_text("Ada Lovelace") == ("Ada Lovelace", [])
    assert clean_text("A\x00da\ud800\udbff") == (
        "Ada\ufffd\ufffd",
        ["1 NUL (U+0000) removed", "2 lone surrogate(s) replaced by U+FFFD"],
    )


def test_clean_key_keeps_distinct_keys_distinct() -> None:
    keys = ["caf\udce9.txt", "caf\udce8.txt", "id\ud800", "id\ud801", "plain"]
    cleaned = [clean_key(k) for k in keys]
    assert cleaned == ["caf\\xe9.txt", "caf\\xe8.txt", "id\\ud800", "id\\ud801", "plain"]
    for k in cleaned:
        k.encode("utf-8")


def test_clean_json_reaches_every_string_keys_included() -> None:
    value = {"k\x00": ["v\x00", {"x": "y\x00"}, 3, None]}
    assert unstorable(value) and not unstorable(clean_json(value, lambda s: s.replace("\x00", "")))
    assert clean_json(value, lambda s: s.replace("\x00", "")) == {"k": ["v", {"x": "y"}, 3, None]}
