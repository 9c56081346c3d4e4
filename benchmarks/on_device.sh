#!/usr/bin/env bash
# kbert's GPU tables (docs/backends.md), on a machine whose image has JAX and PyTorch with CUDA but
# no TensorFlow and no network. Prepare the wheels where pip can reach PyPI:
#
#     pip wheel --no-deps -w .device/wheels .          # kbert itself
#     pip download --no-deps -d .device/wheels keras keras-hub transformers tokenizers safetensors ...
#     (and h5py, optree, sentencepiece, regex, pyyaml for the device's Python)
#
# then, on the device, from the repository root:  OUT=results bash benchmarks/on_device.sh
# Each table is written to $OUT as it is finished, so a run cut short keeps what it measured.
# It also writes $OUT.tar.gz (or $ARCHIVE), everything measured so far, after each table. QUICK=1 runs the same steps on
# bert_tiny / few calls (a dry run on a CPU); ONLY="profile generate" (names of the steps below) runs those alone.
set -u
out=$(realpath -m "${OUT:-device-results}")
wheels=$(realpath .device/wheels)
workdir=$(mktemp -d)  # the checks and benchmarks run outside the repository: `import kbert` is the wheel
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv 2>&1; python -V;
  python -c "import jax, torch; print('jax', jax.__version__, jax.devices()); print('torch', torch.__version__)"; } \
  | tee "$out/machine.txt"

# Without an index pip takes only these wheels; a package the image already has is kept. The image's
# Python may be the system's (PEP 668) and have no `pip` on PATH.
export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore
for package in absl-py namex optree h5py packaging mdurl markdown-it-py pygments rich keras \
               regex pyyaml keras-hub sentencepiece tokenizers safetensors filelock fsspec tqdm \
               typing_extensions idna certifi urllib3 charset-normalizer requests huggingface_hub transformers kbert; do
  (cd "$workdir" && python -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$package") 2>/dev/null \
    && continue
  python -m pip install -q --no-index --no-deps --find-links "$wheels" "$package" 2>&1 | tail -1 || true
done
(cd "$workdir" && python -c "import sys, kbert; assert 'tensorflow' not in sys.modules; print('kbert', kbert.__version__, 'without TensorFlow')") \
  | tee -a "$out/machine.txt"

cp -r benchmarks "$workdir/"
cp docs/examples/msra_generative_ie.py "$workdir/"
extraction_data=$(realpath "${EXTRACTION_DATA:-.device/msra-ie}" 2>/dev/null)
repo=$(pwd)
cd "$workdir" || exit 1

case $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null) in
  *H100*PCIe*) peaks="fp32=51.2 tf32=378 bf16=756" ;;
  *H100*|*H200*) peaks="fp32=66.9 tf32=494.7 bf16=989.4" ;;  # SXM: dense peaks of the data sheet
  *) peaks="" ;;
esac
engines="kbert/jax kbert/torch keras-hub/jax keras-hub/torch"
if [ -n "${QUICK:-}" ]; then quick=--quick; calls=2; length=32; long=64; else quick=; calls=20; length=128; long=512; fi
pack() {  # the device tool brings back few files: everything measured so far, in one archive
  tar czf "${ARCHIVE:-$out.tar.gz}" -C "$(dirname "$out")" "$(basename "$out")"
}
wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
bench() {  # NAME SECONDS ARGS...: one table, stopped after SECONDS so the next one still runs
  local name=$1 seconds=$2; shift 2
  wanted "$name" || return 0
  timeout "$seconds" python -m benchmarks.backends $quick --rounds 3 --json "$out/$name.json" \
    ${peaks:+--peak-tflops $peaks} "$@" 2>"$out/$name.log" | tee "$out/$name.txt"
  pack
}
if wanted profile; then  # where a training step's time goes, kbert against keras-hub on JAX
  timeout 240 python -m benchmarks.step_profile --hlo "$out/hlo" ${QUICK:+--config bert_tiny --batch 4 --length 32} \
    2>"$out/profile.log" | tee "$out/profile.txt"
  pack
fi
bench encode 180 --task encode --batches 8 --length "$length" --calls "$calls" --precisions tf32 bf16 \
  --engines $engines kbert-einsum/jax kbert-fused/torch transformers/torch --baseline "keras-hub/jax tf32"
bench encode128 120 --task encode --batches 128 --length "$length" --calls 5 --precisions tf32 bf16 \
  --engines kbert/jax keras-hub/jax transformers/torch --baseline "keras-hub/jax tf32"
bench train 150 --task train --batches 32 --length "$length" --calls $((calls / 2)) --precisions tf32 bf16 \
  --engines kbert/jax keras-hub/jax transformers/torch --baseline "keras-hub/jax tf32"
[ -n "${QUICK:-}" ] || bench generate 200 --task generate --batches 8 1 --calls 2 --precisions tf32 \
  --engines kbert/jax keras-hub/jax --baseline "keras-hub/jax tf32"

# Issue 58's targets, at the sizes a user would choose: BERT-base bf16 training at 256 x 128 (kbert-fused
# trains without attention dropout, through the fused attention kernel), bf16 inference at 128 x 128 (kbert-cls
# returns the [CLS] vectors alone), GPT-2 batch-1 greedy generation (kbert-slots16: caches in steps of 16), and
# where a 256 x 128 step's time goes. ONLY="train256 encode128bf16 generate1 profile256" runs these alone.
bench train256 200 --task train --batches 256 --length "$length" --calls 5 --precisions bf16 \
  --engines kbert/jax kbert-fused/jax keras-hub/jax transformers/torch --baseline "keras-hub/jax bf16"
bench encode128bf16 120 --task encode --batches 128 --length "$length" --calls 10 --precisions bf16 \
  --engines kbert/jax kbert-cls/jax keras-hub/jax transformers/torch --baseline "keras-hub/jax bf16"
bench generate1 150 --task generate --batches 1 --calls 3 --precisions tf32 \
  --engines kbert/jax kbert-slots16/jax keras-hub/jax --baseline "keras-hub/jax tf32"
# --remat's memory and time (peak: each worker's GPU allocator peak), and training at 512 tokens a row, where
# attention is a larger share of the step. ONLY="remat train512".
bench remat 150 --task train --batches 256 --length "$length" --calls 5 --precisions bf16 \
  --engines kbert/jax kbert-remat/jax keras-hub/jax --baseline "kbert/jax bf16"
bench train512 180 --task train --batches 32 --length "$long" --calls 5 --precisions bf16 \
  --engines kbert/jax kbert-fused/jax kbert-remat/jax keras-hub/jax transformers/torch --baseline "keras-hub/jax bf16"
if wanted profile256; then
  if [ -n "${QUICK:-}" ]; then sizes="--config bert_tiny --batch 4 --length 32"; else sizes="--batch 256"; fi
  timeout 150 python -m benchmarks.step_profile --precisions bf16 --calls 5 $sizes 2>"$out/profile256.log" \
    | tee "$out/profile256.txt"
  pack
fi

# MSRA generative extraction (docs/generation.md) with T5.1.1 small from random weights, at UniLM's budget
# (2 epochs): the runs of $EXTRACTION side by side on the one GPU, each trained then scored on the test set.
# .device/msra-ie holds `msra_generative_ie.py pairs`' train/dev/test.tsv and vocab.txt; a run is
# NAME=ARGS, its extra `kbert train` arguments joined by commas (DATA/ names a file of .device/msra-ie).
if wanted extraction; then
  export KERAS_BACKEND=jax XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_COMPILATION_CACHE_DIR="$workdir/jax-cache" \
         JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 PYTHONUNBUFFERED=1
  for run in ${EXTRACTION:-base=--lr,1e-3}; do
    name=${run%%=*}; args=${run#*=}; args=${args//,/ }; args=${args//DATA\//$extraction_data/}
    # shellcheck disable=SC2086
    (timeout "${EXTRACTION_SECONDS:-480}" python -m kbert train --task seq2seq --model t5.1.1 \
       --config "$repo/configs/t5_small_chinese.json" --vocab "$extraction_data/vocab.txt" \
       --train "$extraction_data/train.tsv" --valid "$extraction_data/dev.tsv" --epochs 2 --batch-size 32 \
       --maxlen 256 --out "$workdir/$name" $args > "$out/$name.log" 2>&1 \
     && timeout "${SCORING_SECONDS:-240}" python msra_generative_ie.py score "$workdir/$name" \
       "$extraction_data/test.tsv" > "$out/$name-score.txt" 2>&1) &
  done
  while [ -n "$(jobs -r)" ]; do sleep 30; pack; done
  pack
fi
