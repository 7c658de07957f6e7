#!/usr/bin/env bash
# Convert a model's RNN to a cuDNN blob and verify it: the one CI step that github-actions.yml and
# gitlab-ci.yml (beside this file) run.
#
#   verify-model.sh SOURCE BLOB [OUT_DIR]
#
# Converts SOURCE (a Keras, PyTorch, ONNX or TF1 file) to BLOB (.bin or .safetensors), then verifies BLOB
# against SOURCE and writes OUT_DIR/verify-report.json, OUT_DIR/verify-junit.xml and OUT_DIR/verify-summary.md (a
# markdown table of the verdicts; OUT_DIR: verify-out), also when verify fails or cannot run, for the CI to keep. The exit code is verify's:
#   0 match, 1 mismatch, 2 bad input or nothing to compare with, 3 a needed backend is missing,
#   4 a bug in rnnconv.
# A conversion that fails exits with its own code (2, 3 or 4), verifies nothing, and says so in the report
# and the JUnit file.
#
# Settings, from the environment:
#   RNNCONV_LAYER        the RNN to convert when SOURCE holds several (a Keras layer, a PyTorch prefix, ...)
#   RNNCONV_CONVERT=no   verify BLOB as it is (made elsewhere, or committed) instead of converting SOURCE
#   RNNCONV_VERIFY_ARGS  more verify options, split at spaces ("--seq-len 16 --plot verify-out/errors.svg")
#   RNNCONV              the command, split at spaces [default: rnnconv; e.g. "python -m rnnconv"]
set -uo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: $0 SOURCE BLOB [OUT_DIR]" >&2
    exit 2
fi
source_file=$1
blob=$2
out=${3:-verify-out}
read -r -a rnnconv <<< "${RNNCONV:-rnnconv}"
read -r -a verify_args <<< "${RNNCONV_VERIFY_ARGS:-}"
layer=()  # (empty arrays are expanded as ${a[@]+"${a[@]}"}: bash before 4.4 calls them unbound)
if [ -n "${RNNCONV_LAYER:-}" ]; then
    layer=(--layer "$RNNCONV_LAYER")
fi

mkdir -p "$out" "$(dirname "$blob")" || exit 2
convert=()
if [ "${RNNCONV_CONVERT:-yes}" != no ]; then
    # --convert --force: the blob is made again from the source as it is now; a conversion that fails is
    # written to the report and the JUnit file like a verify that could not run
    convert=(--convert)
fi
"${rnnconv[@]}" verify "$blob" --against "$source_file" ${convert[@]+"${convert[@]}"} ${layer[@]+"${layer[@]}"} \
    --report "$out/verify-report.json" --junit "$out/verify-junit.xml" --summary "$out/verify-summary.md" --force \
    ${verify_args[@]+"${verify_args[@]}"}
status=$?
case $status in
    0) verdict="the blob computes what its source computes" ;;
    1) verdict="MISMATCH: the blob does not compute what its source computes" ;;
    2) verdict="bad input, or nothing to compare with" ;;
    3) verdict="a backend verify needs is missing here" ;;
    *) verdict="rnnconv failed" ;;
esac
echo "verify-model.sh: exit $status, $verdict; report, JUnit XML and summary in $out/" >&2
exit "$status"
