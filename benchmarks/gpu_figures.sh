#!/usr/bin/env bash
# The GPU figures of docs/benchmarks.md and docs/cluster.md in one run on a lent GPU machine, from
# the repository root: `bash benchmarks/gpu_figures.sh [GROUP...]`. Each group writes one log,
# $OUT/GROUP.log (or /tmp/gpu_figures), and the measured rates go into $OUT/calibration.yaml
# (pseudopairs.workflow.calibration; the file the SLURM requests read, docs/cluster.md).
#
# Groups (default `goals`: every figure of the GPU goals in docs/benchmarks.md, ~14 min on an
# H100/H200 by estimate, most of it start-up, warm-up and the separate trainers of the references;
# one call may run 10 min, so on a lent machine run it as two calls, `part1` then `part2`, the
# groups of each in order of priority):
#   tests       the CUDA-only tests (stack graphs, the levers, device ranks, nvJPEG, device mining)
#   single      one model's updates/s vs a bare step (calibration: one model)
#   levers      stacked training S = 10, graphs: float32, TF32, and each lever on top of TF32
#               (bf16 products, compiled GRU kernels, pinned buffers, all three), then S = 16 and
#               32 with all of them where memory allows; calibration: S = 3 and 10 float32, S = 10
#               TF32 and bf16. Goal: >= 1,000 model-updates/s and >= 5x separate runs at S = 10
#   agreement   bf16 and compiled stacks against float32 separate runs on the synthetic paper
#               world: validation curves and final scores vs the seeds' sd
#   validation  validation + resumable state per 500 updates (calibration: one validation)
#   evaluation  1K x 5K and 5K x 25K: ranks counted on the device vs the bare GEMM (goal <= 2x),
#               the engine before (host settling), ranks and metrics identical to the CPU engine
#   features    224-px JPEGs: decoded by 8 workers vs on the device (goal >= 2,000 img/s)
#   mining      the full 566K x 145K job vs its GEMMs (goal <= 1.5x), each criterion, a profile
#   plan        the paper plan's requested vs estimated GPU-hours from $OUT/calibration.yaml (needs
#               Snakemake; else run `python benchmarks/gpu_hours.py --calibration FILE` on a CPU
#               machine with the file that came back)
#   legacy      the earlier groups' figures (stack / tf32 / graphs / profile, eager stacks)
# Aliases (in order of priority): part1 = tests single levers; part2 = evaluation mining features
# validation agreement plan; goals = both. Between two calls on a lent machine, bring part1's
# $OUT/calibration.yaml into the working tree and pass it as CALIBRATION_FROM to part2. It uses the machine's own PyTorch with the package from src/ (no
# install); each step has a time limit so one slow step cannot eat the others' time.
set -u
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
out="${OUT:-/tmp/gpu_figures}"
mkdir -p "$out"
calibration="$out/calibration.yaml"
# a later call continues the file an earlier one wrote (a lent machine starts each call with an
# empty $OUT): CALIBRATION_FROM=path/to/the/earlier/calibration.yaml bash benchmarks/gpu_figures.sh part2
if [[ -n "${CALIBRATION_FROM:-}" && ! -f "$calibration" ]]; then cp "$CALIBRATION_FROM" "$calibration"; fi
groups="${*:-goals}"
groups="${groups//part1/tests single levers}"
groups="${groups//part2/evaluation mining features validation agreement plan}"
groups="${groups//goals/tests single levers evaluation mining features validation agreement plan}"
want() { [[ " $groups " == *" $1 "* ]]; }
log="$out/run.log"
step() {  # step NAME SECONDS ARGS...: one benchmark, its output appended to $log
    local name=$1 limit=$2
    shift 2
    echo "== $name: python3 $* ($(date +%T))" | tee -a "$log"
    timeout "$limit" python3 "$@" 2>&1 | grep -v "upd/s\]\|upd/s,\|^train \|it/s\]" | tee -a "$log"
    echo "== $name: exit ${PIPESTATUS[0]} ($(date +%T))" | tee -a "$log"
}
group() { log="$out/$1.log"; : > "$log"; }
stack() {  # stack NAME SIZE ARGS...: a stacked-training step at paper shapes, graphs on
    local name=$1 size=$2
    shift 2
    step "$name" 120 benchmarks/training.py --device cuda --preset paper --stack "$size" --updates 40 \
        --warmup 40 --graphs "$@"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name())"
if want tests; then
    group tests
    step tests 150 -m pytest -q -p no:cacheprovider tests/test_stack.py tests/test_stack_graph.py \
        tests/test_stack_levers.py tests/test_evaluation.py tests/test_features.py tests/test_mining.py -k cuda
fi
if want single; then
    group single
    step single 60 benchmarks/training.py --device cuda --preset paper --updates 400 --calibration "$calibration"
fi
if want levers; then
    group levers
    stack stack3-float32 3 --calibration "$calibration"
    stack stack10-float32 10 --calibration "$calibration"
    stack stack10-tf32 10 --tf32 --calibration "$calibration"
    stack stack10-bf16 10 --tf32 --precision bf16 --calibration "$calibration"
    # the separate trainers' rate is the same in every run at S = 10: measured once above (tf32)
    stack stack10-compiled 10 --tf32 --compile --no-reference
    stack stack10-pinned 10 --tf32 --pinned --no-reference
    stack stack10-all 10 --tf32 --precision bf16 --compile --pinned
    stack stack16-all 16 --tf32 --precision bf16 --compile --pinned --no-reference
    stack stack32-all 32 --tf32 --precision bf16 --compile --pinned --no-reference
    step profile10-all 90 benchmarks/training.py --device cuda --preset paper --stack 10 --updates 10 \
        --warmup 40 --graphs --tf32 --precision bf16 --compile --pinned --profile 10
    grep -h "^== stack\|ratio stacked\|^stacked  \|peak GPU" "$out/levers.log" | tee "$out/levers.summary"
fi
if want agreement; then
    group agreement
    step agreement 200 benchmarks/stacked_agreement.py --device cuda --preset paper --seeds 3 \
        --updates 1000 --validate-every 100 --bf16 --compile
fi
if want validation; then
    group validation
    step validation 120 benchmarks/validation_overhead.py --device cuda --preset paper --calibration "$calibration"
fi
if want evaluation; then
    group evaluation
    step evaluation 120 benchmarks/evaluation.py --device cuda --repeats 7
fi
if want features; then
    group features
    step features 150 benchmarks/features.py --device cuda --repeats 2 --calibration "$calibration"
fi
if want mining; then
    group mining
    step mining 240 benchmarks/mining.py --device cuda --repeats 1 --profile --calibration "$calibration" \
        --criteria mutual,inverted_softmax,dynamic_inverted_softmax,margin,csls
fi
if want plan; then
    group plan
    if [[ ! -f "$calibration" ]]; then
        echo "plan: no $calibration (run the groups that measure first)" | tee -a "$log"
    elif python3 -c "import snakemake, snakemake_executor_plugin_slurm" 2>/dev/null; then
        step plan 300 benchmarks/gpu_hours.py --calibration "$calibration"
    else
        echo "plan: Snakemake is not installed here; on a CPU machine run" \
             "python benchmarks/gpu_hours.py --calibration $calibration (the file comes back with \$OUT)" | tee -a "$log"
    fi
fi
if want legacy; then  # the figures of the H200 leases of 2026-11-26/27 (docs/benchmarks.md)
    group legacy
    for size in 1 3 10; do
        step "stack$size-eager" 90 benchmarks/training.py --device cuda --preset paper --stack "$size" \
            --updates 60 --warmup 5
    done
    step profile10-eager 90 benchmarks/training.py --device cuda --preset paper --stack 10 \
        --updates 20 --warmup 5 --tf32 --profile 10
    step agreement-tf32 200 benchmarks/stacked_agreement.py --device cuda --preset paper --seeds 3 \
        --updates 1000 --validate-every 100 --tf32 --eager
fi
[[ -f "$calibration" ]] && { echo "== calibration written: $calibration"; cat "$calibration"; }
echo "== done ($(date +%T))"
