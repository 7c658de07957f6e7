#!/usr/bin/env bash
# The GPU day in one command: from a bare GPU machine without network (Python 3.12 with torch built for CUDA,
# numpy, h5py, safetensors, rich, typer, nvidia-cudnn-cu13 and nvcc), install what rnnconv still needs from the
# wheels brought along, try to build PyCUDA within a time limit (and go on with rnnconv's own ctypes CUDA
# session without it), then run `rnnconv doctor`, the cuDNN battery, `verify --backend cudnn` on a blob of
# each source format, and the tests marked for a GPU. Everything lands in one output folder, as at most
# 8 files (the device tool brings back no more): gpu_day.log, steps.tsv, doctor.json, cudnn_layout.json,
# pytest_gpu.xml, cudnn_api.log (cuDNN's own log, CUDNN_LOGLEVEL_DBG=2) and rest.tar.gz (verify reports,
# install and build logs, the machine's description).
#
# Before the run, on the machine that has the wheel kit, from the checkout's root, fill the ignored folder
# .gpu/ (the checkout travels to the GPU machine, nothing else does; the device tool carries .gpu/ when
# it is named in `carry`):
#
#     mkdir -p .gpu && cp KIT/wheels/* .gpu/
#     python3 -m pip download -q -d .gpu --only-binary=:all: --python-version 3.12 pytest setuptools
#     python3 -m pip download -q -d .gpu/fallback --only-binary=:all: --python-version 3.12 --platform \
#         manylinux_2_28_x86_64 --platform manylinux2014_x86_64 h5py safetensors msgpack rich typer  # only these
#         # and their own needs (markdown-it-py, mdurl, shellingham): installed only where the machine lacks one
#     python3 -m rnnconv convert fixtures/onnx/gru3_bi_torchscript.onnx .gpu/onnx.bin --force
#
# (pytest runs the GPU tests and setuptools builds PyCUDA, where the kit has neither; the GPU machine has no
# onnx package, so the ONNX fixture's blob is made here and .gpu/onnx.bin is used instead of converting there.)
#
# On the GPU machine, from the checkout's root:
#
#     bash bench/gpu_day.sh "$OUT"                                    # every step, in under 9 minutes
#     bash bench/gpu_day.sh "$OUT" install pycuda doctor battery      # or the same in two commands
#     bash bench/gpu_day.sh "$OUT" install verify tests
#
# Steps: install pycuda doctor battery verify tests (in that order, whatever order they are named in).
# PyCUDA builds on the CPU beside the battery on the GPU (into a folder of its own, put on PYTHONPATH only
# once built): the battery runs rnnconv's ctypes CUDA session, verify and the tests whichever is there then
# (test_cuda_session.py runs both where PyCUDA built). The battery runs its --quick subset first
# (cudnn_layout_quick.json), so a run cut short still has every group and dtype.
# Exit: 0 every step passed; 1 a step found a difference (the battery, a verify, a test); 2 bad arguments;
# 3 stopped at the first step that needed a GPU (or a library) this machine lacks: the last line says which
# and why; what was done until then is in the output folder.
#
# Environment: PYTHON (python3); WHEELS (.gpu); SITE (.gpu-site: the install target, kept between commands
# on a warm machine, never carried: a carried folder would replace it); PYCUDA_SECONDS (150: the build's
# limit); BATTERY_ARGS (more gpu-battery options, e.g. --quick).
set -uo pipefail

ALL_STEPS=(install pycuda doctor battery verify tests)
usage() { sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

if [[ $# -ge 1 && ($1 == -h || $1 == --help) ]]; then
    usage
    exit 0
fi
OUT_DIR=${1:-${OUT:-}}
[[ $# -ge 1 ]] && shift
if [[ -z $OUT_DIR ]]; then
    echo "error: give the output folder (bash bench/gpu_day.sh OUT_DIR [STEP...]), or set \$OUT" >&2
    exit 2
fi
declare -A WANTED=()
for step in "$@"; do
    if [[ ! " ${ALL_STEPS[*]} " =~ " $step " ]]; then
        echo "error: no step '$step'; the steps are: ${ALL_STEPS[*]}" >&2
        exit 2
    fi
    WANTED[$step]=1
done
if [[ $# -eq 0 ]]; then
    for step in "${ALL_STEPS[@]}"; do WANTED[$step]=1; done
fi

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-$ROOT/.gpu}
SITE=${SITE:-$ROOT/.gpu-site}
PYCUDA_SECONDS=${PYCUDA_SECONDS:-300}
BATTERY_ARGS=${BATTERY_ARGS:-}
mkdir -p "$OUT_DIR" || exit 2
OUT_DIR=$(cd "$OUT_DIR" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_day.XXXXXX")
LOG=$OUT_DIR/gpu_day.log
STEPS=$OUT_DIR/steps.tsv
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$OUT_DIR/cudnn_api.log"
export RNNCONV_REQUIRE_GPU=1  # the GPU tests fail instead of skipping where a GPU should be
STARTED=$(date +%s.%N)
FOUND_DIFFERENCE=0
[[ -f $STEPS ]] || printf 'step\tseconds\texit\tnote\n' >"$STEPS"

say() { printf '%s\n' "$*" | tee -a "$LOG"; }
elapsed() { "$PYTHON" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(date +%s.%N)"; }

# Run one command with a time limit, its output to the log; record its time and exit code.
# run NAME SECONDS COMMAND... ; sets RC and LAST_LINE (the command's last line of output).
run() {
    local name=$1 seconds=$2 begin
    shift 2
    begin=$(date +%s.%N)
    say "== $name: $* (limit ${seconds}s)"
    # into the log as it comes: a run killed from outside still leaves everything up to that moment
    timeout --kill-after=10 "$seconds" "$@" 2>&1 | tee -a "$LOG" >"$WORK/$name.out"
    RC=${PIPESTATUS[0]}
    LAST_LINE=$(grep -v '^[[:space:]]*$' "$WORK/$name.out" | tail -n 1)
    local took
    took=$(elapsed "$begin")
    [[ $RC -eq 124 || $RC -eq 137 ]] && LAST_LINE="ran past its ${seconds}s limit"
    printf '%s\t%s\t%s\t%s\n' "$name" "$took" "$RC" "${LAST_LINE//$'\t'/ }" >>"$STEPS"
    say "== $name: exit $RC after ${took}s"
}

# Stop a process and everything it started (the PyCUDA build: timeout, pip, the compiler).
stop_tree() {
    local child
    for child in $(pgrep -P "$1"); do stop_tree "$child"; done
    kill "$1" 2>/dev/null
}

# Pack everything into at most 8 files; called on every exit.
finish() {
    local code=$?
    trap - EXIT INT TERM
    [[ -n ${PYCUDA_PID:-} && -z ${pycuda_joined:-} ]] && stop_tree "$PYCUDA_PID"  # a build still running
    say "== total ${BASH_SOURCE[0]##*/} time: $(elapsed "$STARTED")s, exit $code"
    if [[ -f $OUT_DIR/cudnn_api.log ]] && (($(stat -c %s "$OUT_DIR/cudnn_api.log") > 15000000)); then
        mv "$OUT_DIR/cudnn_api.log" "$WORK/cudnn_api.full.log"  # too big to come back: its end, and all of it packed
        tail -c 15000000 "$WORK/cudnn_api.full.log" >"$OUT_DIR/cudnn_api.log"
    fi
    tar -czf "$OUT_DIR/rest.tar.gz" -C "$WORK" --exclude=./pycuda-site . 2>/dev/null
    rm -rf "$WORK"
    exit "$code"
}
trap finish EXIT
trap 'say "== interrupted"; exit 130' INT TERM

# A step that needs a GPU and found none (exit 3) ends the run here, with its reason as the last line.
stop_if_missing() {
    if [[ $RC -eq 3 ]]; then
        say "stopped at '$1' (exit 3): ${LAST_LINE#error: }"
        exit 3
    fi
}

{
    echo "rnnconv GPU day: $(date -u +%FT%TZ), checkout $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "steps: $(for s in "${ALL_STEPS[@]}"; do [[ -n ${WANTED[$s]:-} ]] && printf '%s ' "$s"; done)"
    echo "python: $("$PYTHON" -c 'import sys; print(sys.version.split()[0], sys.executable)' 2>&1)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
    echo "nvcc: $(command -v nvcc || echo none)"
} | tee -a "$LOG" >"$WORK/machine.txt"
"$PYTHON" -m pip list 2>/dev/null >>"$WORK/machine.txt"

if [[ -n ${WANTED[install]:-} ]]; then
    shopt -s nullglob
    wheels=("$WHEELS"/*.whl)
    shopt -u nullglob
    if ((${#wheels[@]})); then
        run install 120 "$PYTHON" -m pip install --no-index --no-deps --upgrade --disable-pip-version-check \
            --target "$SITE" "${wheels[@]}"
    else
        say "== install: no wheels in $WHEELS (fill it from the kit first); going on with what is installed"
        RC=0
    fi
    fallback=("$WHEELS"/fallback/*.whl)
    if ((${#fallback[@]})) && [[ -f ${fallback[0]} ]] &&
        ! "$PYTHON" -c "import h5py, safetensors, msgpack, rich, typer" 2>/dev/null; then
        run install_fallback 120 "$PYTHON" -m pip install --no-index --no-deps --upgrade --disable-pip-version-check \
            --target "$SITE" "${fallback[@]}"
    fi
    run imports 60 "$PYTHON" -c "import numpy, h5py, msgpack, rich, typer, pydantic, blake3, google_crc32c
import rnnconv.cli.commands, rnnconv.gpu.battery
print('rnnconv imports from', rnnconv.__file__)"
    if [[ $RC -ne 0 ]]; then
        say "stopped at 'install' (exit 3): rnnconv does not import here: $LAST_LINE"
        exit 3
    fi
fi

PYCUDA_PID=
PYCUDA_SITE=$WORK/pycuda-site
if [[ -n ${WANTED[pycuda]:-} ]]; then
    sdist=$(ls "$WHEELS"/pycuda-*.tar.gz 2>/dev/null | head -n 1)
    if [[ -z $sdist ]]; then
        say "== pycuda: no sdist in $WHEELS; rnnconv's ctypes CUDA session will run"
    elif ! command -v nvcc >/dev/null; then
        say "== pycuda: no nvcc here; rnnconv's ctypes CUDA session will run"
    else
        export CUDA_ROOT=${CUDA_ROOT:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
        # the build compiles its 40-odd C++ files one at a time, on the CPU: it runs beside the GPU steps,
        # bounded by PYCUDA_SECONDS, into a folder nothing imports from until it has finished
        (
            run pycuda "$PYCUDA_SECONDS" "$PYTHON" -m pip install --no-index --no-deps --no-build-isolation \
                --disable-pip-version-check --target "$PYCUDA_SITE" "$sdist"
            echo "$RC" >"$WORK/pycuda.rc"
        ) &
        PYCUDA_PID=$!
    fi
fi

# Wait for the PyCUDA build (if one runs) and put it on PYTHONPATH where it built.
pycuda_joined=
join_pycuda() {
    [[ -n $PYCUDA_PID && -z $pycuda_joined ]] || return 0
    pycuda_joined=1
    wait "$PYCUDA_PID"
    if [[ $(cat "$WORK/pycuda.rc" 2>/dev/null) == 0 ]]; then
        export PYTHONPATH="$PYCUDA_SITE:$PYTHONPATH"
        say "== pycuda: built; the steps from here on may run PyCUDA's session"
    else
        say "== pycuda: not built (see the log); rnnconv's ctypes CUDA session runs"
    fi
}

if [[ -n ${WANTED[doctor]:-} ]]; then
    run doctor 120 "$PYTHON" -m rnnconv doctor --json
    cp "$WORK/doctor.out" "$OUT_DIR/doctor.json"
    run doctor_text 120 "$PYTHON" -m rnnconv doctor --verbose
fi

if [[ -n ${WANTED[battery]:-} ]]; then
    # the ctypes session: PyCUDA is still building (the tests run PyCUDA's where it built)
    RNNCONV_CUDA_SESSION=ctypes run battery_quick 120 "$PYTHON" -m rnnconv gpu-battery --quick --force \
        -o "$OUT_DIR/cudnn_layout_quick.json"
    stop_if_missing battery
    [[ $RC -eq 0 ]] || FOUND_DIFFERENCE=1
    # shellcheck disable=SC2086  # BATTERY_ARGS is a list of options
    RNNCONV_CUDA_SESSION=ctypes run battery 360 "$PYTHON" -m rnnconv gpu-battery --force \
        -o "$OUT_DIR/cudnn_layout.json" $BATTERY_ARGS
    stop_if_missing battery
    [[ $RC -eq 0 ]] || FOUND_DIFFERENCE=1
fi

# verify --backend cudnn on a blob of each source format. The source runs in its own framework; where that
# framework or runtime is not on this machine (TensorFlow, OpenVINO, LiteRT, ncnn, MLX), the same blob is run
# through cuDNN against rnnconv's numpy reference instead (which CI holds to those frameworks), so every blob still meets cuDNN.
VERIFY=(
    "torch_lstm_proj|fixtures/torch/lstm_proj.pt|"
    "torch_gru_bf16|fixtures/torch/gru_bf16.pt|"
    "torch_seq2seq_decoder|fixtures/torch/seq2seq.pt|--layer decoder.rnn"
    "torch_safetensors|fixtures/torch/rnn_relu.safetensors|"
    "keras3|fixtures/keras3/lstm.keras|"
    "keras2|fixtures/keras2/lstm.h5|"
    "tf_keras|fixtures/tf_keras/lstm.h5|"
    "onnx|fixtures/onnx/gru3_bi_torchscript.onnx|"
    "tf1|fixtures/tf1/gru_bi.ckpt|"
    "openvino_f16|fixtures/openvino/lstm_saved_f16.xml|"
    "tflite|fixtures/tflite/rnn_tanh.tflite|"
    "ncnn|fixtures/ncnn/lstm_proj.param|"
    "mlx|fixtures/mlx/lstm.safetensors|"
)
join_pycuda
if [[ -n ${WANTED[verify]:-} ]]; then
    for item in "${VERIFY[@]}"; do  # every conversion first: they need no GPU
        IFS='|' read -r name source options <<<"$item"
        if [[ -f $WHEELS/$name.bin ]]; then  # converted before the run (ONNX: this machine has no onnx package)
            cp "$WHEELS/$name.bin" "$WHEELS/$name.bin.json" "$WORK/"
            say "== convert_$name: taken from $WHEELS/$name.bin"
            continue
        fi
        # shellcheck disable=SC2086  # options is a list of options
        run "convert_$name" 120 "$PYTHON" -m rnnconv convert "$source" "$WORK/$name.bin" --to cudnn --force $options
        [[ $RC -eq 0 || $RC -eq 3 ]] || FOUND_DIFFERENCE=1  # 3: a library this machine lacks (said in the log)
    done
    for item in "${VERIFY[@]}"; do
        IFS='|' read -r name source options <<<"$item"
        [[ -f $WORK/$name.bin ]] || continue
        run "verify_$name" 180 "$PYTHON" -m rnnconv verify "$WORK/$name.bin" --backend cudnn --ragged --force \
            --report "$WORK/verify_$name.json"
        if [[ $RC -eq 3 ]]; then  # no GPU, or the source's framework is not here: cuDNN against the reference
            run "reference_$name" 180 "$PYTHON" bench/cudnn_against_reference.py "$WORK/$name.bin"
            stop_if_missing "verify ($name)"
        fi
        [[ $RC -eq 0 ]] || FOUND_DIFFERENCE=1
    done
fi

if [[ -n ${WANTED[tests]:-} ]]; then
    if ! "$PYTHON" -c "import pytest" 2>/dev/null; then
        say "stopped at 'tests' (exit 3): pytest is not installed here (add its wheels to $WHEELS, see the header)"
        exit 3
    fi
    run gpu_probe 60 "$PYTHON" -c "import sys
from rnnconv.gpu.backend import probe
status = probe()
print(f'error: {status.reason}' if not status.ok else 'cuDNN runs here: ' + repr(status.found))
sys.exit(0 if status.ok else 3)"
    stop_if_missing tests
    run tests 300 "$PYTHON" -m pytest -p no:cacheprovider -q -rs --junitxml="$OUT_DIR/pytest_gpu.xml" \
        tests/test_gpu.py tests/test_cudnn_api.py tests/test_cuda_session.py tests/test_cudnn_layout_fixture.py
    stop_if_missing tests
    [[ $RC -eq 0 ]] || FOUND_DIFFERENCE=1
fi

if ((FOUND_DIFFERENCE)); then
    say "done: some step found a difference or failed (see steps.tsv and gpu_day.log)"
    exit 1
fi
say "done: every step passed"
exit 0
