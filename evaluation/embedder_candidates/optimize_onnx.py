"""Offline graph optimisation of the exported MiniLM ONNX (attention/LayerNorm/GELU fusion) with
onnxruntime's own transformers optimiser, then dynamic int8 quantisation of the fused graph.

Needs onnxruntime + onnx only (no torch). Inputs: out/minilm_fp32.onnx (export_onnx.py).
Outputs: out/minilm_fp32_opt.onnx, out/minilm_int8_opt.onnx
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import OUT
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.transformers.optimizer import optimize_model

opt = optimize_model(
    str(OUT / "minilm_fp32.onnx"), model_type="bert", num_heads=12, hidden_size=384, opt_level=1
)
print(opt.get_fused_operator_statistics())
opt.save_model_to_file(str(OUT / "minilm_fp32_opt.onnx"))
quantize_dynamic(
    str(OUT / "minilm_fp32_opt.onnx"),
    str(OUT / "minilm_int8_opt.onnx"),
    weight_type=QuantType.QInt8,
    extra_options={"DefaultTensorType": 1},
)  # 1 = FLOAT
for f in ["minilm_fp32_opt.onnx", "minilm_int8_opt.onnx"]:
    print(f, round((OUT / f).stat().st_size / 1e6, 1), "MB")
