"""Loading settings: the YAML file, the environment and keyword arguments into one
:class:`~pgrag_dag.config.sections.Settings` (whose ``retrieval:`` defaults QueryParam itself judges), then
every space's operator composition checked, so a bad configuration is refused before anything runs (§3.5).

Precedence, highest first: keyword arguments > environment (``PGRAG_…``, nested with ``__``) >
YAML file (``PGRAG_CONFIG`` or ``./pgrag.yaml``) > defaults.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_settings import SettingsError

from pgrag_dag.config.sections import Settings
from pgrag_dag.config.suggestions import describe
from pgrag_dag.errors import ConfigurationError
from pgrag_dag.pipeline.composition import compose_all


def config_file() -> Path:
    """The configuration file: ``PGRAG_CONFIG`` if set, else ``./pgrag.yaml`` (it may not exist)."""
    return Path(os.environ.get("PGRAG_CONFIG", "pgrag.yaml"))


def _check_yaml(path: Path) -> None:
    """Raise a one-line :class:`ConfigurationError` naming ``path`` and the line when the file is not
    UTF-8, not YAML (a syntax error, two documents) or not a mapping of settings (a list, a bare value)."""
    try:
        node = yaml.compose(path.read_bytes().decode("utf-8"), Loader=yaml.SafeLoader)
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"configuration file {path}: is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigurationError(
            f"configuration file {path}: cannot be read ({exc.strerror or exc})"
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = "; ".join(p for p in (exc.context, exc.problem) if p) or " ".join(str(exc).split())
        raise ConfigurationError(f"configuration file {path}{where}: is not valid YAML: {what}") from None
    except yaml.YAMLError as exc:
        raise ConfigurationError(
            f"configuration file {path}: is not valid YAML: {' '.join(str(exc).split())}"
        ) from None
    if node is not None and not isinstance(node, yaml.MappingNode):
        kind = "a list" if isinstance(node, yaml.SequenceNode) else f"the single value {node.value[:40]!r}"
        raise ConfigurationError(
            f"configuration file {path} line {node.start_mark.line + 1}: is {kind}, not a mapping "
            "of settings (e.g. `realms:` at the start of a line)"
        )
    if node is not None:
        _refuse_duplicate_keys(path, node)


def _refuse_duplicate_keys(path: Path, node: yaml.Node) -> None:
    """Raise a one-line :class:`ConfigurationError` naming a key a mapping of ``path`` holds twice and both
    lines: YAML loaders keep the last silently, so a second pasted ``gates:`` line would drop the first."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, value in n.value:
                if isinstance(key, yaml.ScalarNode):
                    line = key.start_mark.line + 1
                    if key.value in seen:
                        raise ConfigurationError(
                            f"configuration file {path} line {line}: key {key.value!r} is given twice (first "
                            f"on line {seen[key.value]}); YAML would keep only the last — merge them into one"
                        )
                    seen[key.value] = line
                stack.append(value)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)


def require_configuration() -> None:
    """Raise unless a configuration is there to read: ``PGRAG_CONFIG`` is set (:func:`load_settings` then
    checks that its file exists), ``./pgrag.yaml`` exists, or the environment declares the realms
    (``PGRAG_REALMS``). What the command line calls before anything else (issue 31 item 5): a command run in a
    folder with no configuration must fail before it creates or starts an embedded database in
    ``./.pgrag`` for an empty default configuration.

    Raises :class:`ConfigurationError`, one line naming the folder and the two ways out.
    """
    if os.environ.get("PGRAG_CONFIG") or os.environ.get("PGRAG_REALMS") or config_file().is_file():
        return
    raise ConfigurationError(
        f"no configuration: PGRAG_CONFIG is not set and {Path.cwd()} has no pgrag.yaml; write one with "
        "`pgrag init DIR` or export PGRAG_CONFIG=path/to/pgrag.yaml"
    )


def load_settings(config: Path | str | None = None, *, required: bool = False, **overrides: Any) -> Settings:
    """Build :class:`Settings` from ``config`` (default :func:`config_file`), the environment and
    ``overrides``; with ``required`` (the command line) and no ``config``, first
    :func:`require_configuration`.

    Relative paths in the file resolve against the file's directory. Every space's operator
    composition is resolved here. Raises :class:`ConfigurationError` naming the invalid field, the
    space/stage/option of a bad composition, the file when ``config`` or ``PGRAG_CONFIG`` names one that does
    not exist, or the file and the line when it is not YAML or not a mapping.
    """
    if required and config is None:
        require_configuration()
    path = Path(config) if config is not None else config_file()
    if config is not None and not path.is_file():
        raise ConfigurationError(f"configuration file {path} does not exist")
    if (
        config is None and os.environ.get("PGRAG_CONFIG") and not path.is_file()
    ):  # a typo would index elsewhere
        raise ConfigurationError(f"configuration file {path} (PGRAG_CONFIG) does not exist")
    cls: type[Settings] = Settings
    if path.is_file():
        _check_yaml(path)
        overrides.setdefault("config_dir", path.resolve().parent)
        cls = type(
            "Settings", (Settings,), {"model_config": {**Settings.model_config, "yaml_file": str(path)}}
        )
    try:
        settings = cls(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            describe(err, Settings, env_prefix="PGRAG_") for err in exc.errors()
        )  # unknown keys name the nearest valid one
        raise ConfigurationError(f"invalid settings ({exc.error_count()}): {problems}") from exc
    except yaml.YAMLError as exc:
        raise ConfigurationError(
            f"configuration file {path} is not valid YAML: {' '.join(str(exc).split())}"
        ) from None
    except (
        SettingsError,
        ValueError,
        TypeError,
    ) as exc:  # a PGRAG_ variable that is not JSON; a file that is no mapping
        cause = exc.__cause__ or exc
        raise ConfigurationError(
            f"invalid settings ({path if path.is_file() else 'environment'}): "
            f"{' '.join(str(exc).split())}"
            + (f" ({' '.join(str(cause).split())})" if cause is not exc else "")
        ) from None
    compose_all(settings)  # every space's operators resolve and their options validate, or this raises
    return settings
