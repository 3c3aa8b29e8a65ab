#!/usr/bin/env bash
# The GPU figures of docs/benchmarks.md (training, stacked training, validation overhead) in one
# run on a lent GPU machine, from the repository root: `bash benchmarks/gpu_figures.sh [GROUP...]`
# with groups `tests single stack tf32 graphs profile validation agreement` (default: all, in
# that order; ~8 min on an H100/H200; at most 8 logs come back from a lent machine, so run the
# groups in two calls there). It uses the machine's own PyTorch with the package from src/
# (no install); each step has a time limit so one slow step cannot eat the others' time. Logs go
# to $OUT (or /tmp/gpu_figures).
set -u
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
out="${OUT:-/tmp/gpu_figures}"
mkdir -p "$out"
groups="${*:-tests single stack tf32 graphs profile validation agreement}"
want() { [[ " $groups " == *" $1 "* ]]; }
step() {  # step NAME SECONDS ARGS...: one benchmark, its output in $out/NAME.log
    local name=$1 limit=$2
    shift 2
    echo "== $name: python3 $* ($(date +%T))"
    timeout "$limit" python3 "$@" 2>&1 | grep -v "upd/s\]\|upd/s,\|^train " | tee "$out/$name.log"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
if want tests; then  # the suite's CUDA-only tests (skipped on a CPU machine)
    step tests 120 -m pytest -q -p no:cacheprovider tests/test_stack.py tests/test_stack_graph.py \
        tests/test_evaluation.py -k cuda
fi
want single && step single 60 benchmarks/training.py --device cuda --preset paper --updates 400
if want stack; then
    step fused-check 60 -c "
import torch
from pseudopairs.model.encoders import RankingModel
from pseudopairs.model.stack import StackedRankingModel
torch.manual_seed(0)
stack = StackedRankingModel([RankingModel(500, embedding_dim=300, joint_dim=1024) for _ in range(3)]).cuda()
tokens = torch.randint(1, 500, (3, 64, 20)); lengths = torch.randint(1, 21, (3, 64))
fused = stack.encode_captions(tokens, lengths)
stack.fused_cell = False
plain = stack.encode_captions(tokens, lengths)
print('fused GRU cell vs op-by-op step: max |difference| of the embeddings', float((fused - plain).abs().max()))
"
    for size in 1 3 10; do
        step "stack$size" 90 benchmarks/training.py --device cuda --preset paper --stack "$size" \
            --updates 60 --warmup 5
    done
fi
if want tf32; then
    for size in 3 10; do
        step "stack$size-tf32" 90 benchmarks/training.py --device cuda --preset paper --stack "$size" \
            --updates 60 --warmup 5 --tf32
    done
fi
if want graphs; then  # the pipeline's default on a GPU: each stacked update a replayed CUDA graph
    for size in 3 10; do
        step "stack$size-graphs" 90 benchmarks/training.py --device cuda --preset paper --stack "$size" \
            --updates 60 --warmup 40 --graphs
        step "stack$size-tf32-graphs" 90 benchmarks/training.py --device cuda --preset paper --stack "$size" \
            --updates 60 --warmup 40 --graphs --tf32
    done
    step profile10-graphs 90 benchmarks/training.py --device cuda --preset paper --stack 10 \
        --updates 20 --warmup 40 --tf32 --graphs --profile 10
fi
want profile && step profile10 90 benchmarks/training.py --device cuda --preset paper --stack 10 \
    --updates 20 --warmup 5 --tf32 --profile 10
want validation && step validation 120 benchmarks/validation_overhead.py --device cuda --preset paper --profile
want agreement && step agreement 200 benchmarks/stacked_agreement.py --device cuda --preset paper --seeds 3 \
    --updates 1000 --validate-every 100 --tf32 --eager
echo "== done ($(date +%T))"
