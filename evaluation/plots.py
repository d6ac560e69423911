"""matplotlib for the harnesses' charts, optional: :func:`pyplot` gives the headless pyplot module or ``None``
(with a message) when matplotlib is not installed (``pip install -r evaluation/requirements-eval.txt``), and
:func:`save` writes a figure as PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any | None:
    """``matplotlib.pyplot`` on the Agg backend, or ``None`` when matplotlib is missing (a message says
    so)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -r evaluation/requirements-eval.txt): no chart")
        return None
    return plt


def save(fig: Any, path: Path, *, title: str) -> Path:
    """Title ``fig``, lay it out, write it to ``path`` (PNG, 110 dpi; folders created), close it; returns
    ``path``."""
    import matplotlib.pyplot as plt

    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
