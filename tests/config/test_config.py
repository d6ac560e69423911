"""Settings (pgrag_dag/config.py): a typo in any section is an error naming the nearest valid key
(issue 13 item 8)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pgrag_dag.config import load_settings
from pgrag_dag.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [{"path": ".", "glob": "*.md"}]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"llm": {"model": ["replay"]}}, "llm: unknown key 'model' (did you mean 'models'?)"),
        (
            {"embedding": {"modle": "hashing-sha256"}},
            "embedding: unknown key 'modle' (did you mean 'model'?)",
        ),
        (
            {"chunking": {"chunk_char": 900}},
            "chunking: unknown key 'chunk_char' (did you mean 'chunk_chars'?)",
        ),
        (
            {"extraction": {"gleaning_pass": 2}},
            "extraction: unknown key 'gleaning_pass' (did you mean 'gleaning_passes'?)",
        ),
        (
            {"gates": {"confidence_flor": 0.7}},
            "gates: unknown key 'confidence_flor' (did you mean 'confidence_floor'?)",
        ),
        ({"communities": {"min_sise": 4}}, "communities: unknown key 'min_sise' (did you mean 'min_size'?)"),
        (
            {"temporal": {"contradiction_detect": True}},
            "temporal: unknown key 'contradiction_detect' (did you mean 'contradiction_detection'?)",
        ),
        ({"dagster": {"sensor": False}}, "dagster: unknown key 'sensor' (did you mean 'sensors'?)"),
        (
            {"operations": {"lock_wait": 5}},
            "operations: unknown key 'lock_wait' (did you mean 'lock_wait_s'?)",
        ),
        ({"retrieval": {"topk": 3}}, "retrieval: unknown key 'topk' (did you mean 'top_k'?)"),
        ({"embeding": {}}, "settings: unknown key 'embeding' (did you mean 'embedding'?)"),
        ({"realms": {"acme": {"space": {}}}}, "realms.acme: unknown key 'space' (did you mean 'spaces'?)"),
        (
            {"realms": {"acme": {"spaces": {"docs": {"sources": SOURCES, "extractr": "llm"}}}}},
            "realms.acme.spaces.docs: unknown key 'extractr' (did you mean 'extractor'?)",
        ),
        (
            {"realms": {"acme": {"spaces": {"docs": {"sources": [{"path": ".", "globb": "*.md"}]}}}}},
            "realms.acme.spaces.docs.sources.0: unknown key 'globb' (did you mean 'glob'?)",
        ),
        (
            {
                "realms": {
                    "acme": {
                        "spaces": {
                            "docs": {"sources": SOURCES, "chunker": {"name": "paragraph", "optons": {}}}
                        }
                    }
                }
            },
            "realms.acme.spaces.docs.chunker: unknown key 'optons' (did you mean 'options'?)",
        ),
        (
            {
                "realms": {
                    "acme": {
                        "spaces": {
                            "docs": {"sources": SOURCES, "gates": [{"name": "name_stoplist", "option": {}}]}
                        }
                    }
                }
            },
            "realms.acme.spaces.docs.gates.0: unknown key 'option' (did you mean 'options'?)",
        ),
        ({"embedding": {"zzz": 1}}, "embedding: unknown key 'zzz' (valid keys: model, dim, api_base,"),
    ],
)
def test_a_typo_in_any_section_is_one_line_naming_the_nearest_key(
    tmp_path: Path, section: dict, message: str
) -> None:
    path = tmp_path / "pgrag.yaml"
    path.write_text(yaml.safe_dump(section))
    with pytest.raises(ConfigurationError) as info:
        load_settings(path)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith("invalid settings (")


def test_a_typo_in_an_environment_variable_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PGRAG_EMBEDDING__MODLE", "hashing-sha256")
    monkeypatch.chdir(tmp_path)  # no pgrag.yaml here
    with pytest.raises(
        ConfigurationError,
        match=r"embedding: unknown key 'modle' from environment variable "
        r"PGRAG_EMBEDDING__MODLE \(did you mean 'model'\?\)",
    ):
        load_settings()


def test_a_typo_in_an_operators_options_names_the_nearest_option(tmp_path: Path) -> None:
    space = {
        "sources": SOURCES,
        "allow_empty": True,
        "extractor": {"name": "llm", "options": {"glenaing_passes": 2}},
    }
    path = tmp_path / "pgrag.yaml"
    path.write_text(yaml.safe_dump({"realms": {"acme": {"spaces": {"docs": space}}}}))
    with pytest.raises(
        ConfigurationError,
        match=r"space acme.docs, stage extractor, operator 'llm': options: unknown "
        r"key 'glenaing_passes' \(did you mean 'gleaning_passes'\?\)",
    ):
        load_settings(path)


def test_the_demo_configuration_still_loads() -> None:
    settings = load_settings(ROOT / "pgrag.yaml")
    assert settings.partitions() == ["tenk.disney", "wiki.demo"]
    assert settings.embedding.model == "hashing-sha256"  # tests/fix_pg.py's environment wins over the file


def test_a_pgrag_config_naming_no_file_is_refused_not_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from pgrag_dag.cli import app

    missing = tmp_path / "missing.yaml"
    monkeypatch.setenv("PGRAG_CONFIG", str(missing))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ConfigurationError, match=rf"configuration file {missing} \(PGRAG_CONFIG\) does not exist"
    ):
        load_settings()
    out = CliRunner().invoke(app, ["status"])
    assert out.exit_code == 2 and "(PGRAG_CONFIG) does not exist" in out.output, out.output
    assert not (tmp_path / ".pgrag").exists()  # no embedded server started for it
    monkeypatch.delenv("PGRAG_CONFIG")
    assert load_settings().realms == {}  # no PGRAG_CONFIG and no ./pgrag.yaml: the defaults, as before


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path: Path) -> None:
    """Two pasted ``gates:`` lines (two stoplist suggestions) must not silently keep only the last."""
    config = tmp_path / "pgrag.yaml"
    config.write_text(
        "realms:\n"
        "  docs:\n"
        "    spaces:\n"
        "      docs:\n"
        "        sources: [{path: ., glob: '*.txt'}]\n"
        '        gates: [{name: "name_stoplist", options: {names: ["Note"]}}]\n'
        '        gates: [{name: "name_stoplist", options: {names: ["Other"]}}]\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigurationError) as info:
        load_settings(config)
    assert str(info.value) == (
        f"configuration file {config} line 7: key 'gates' is given twice (first on line 6); YAML would keep "
        "only the last — merge them into one"
    )
