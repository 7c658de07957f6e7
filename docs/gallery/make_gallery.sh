#!/bin/sh
# Regenerate the explain gallery (README, "rnnconv explain"): run from the repository root.
set -e
cd "$(dirname "$0")/../.."
for picture in "keras gru" "keras lstm" "torch lstm" "onnx lstm"; do
    set -- $picture
    python -m rnnconv explain --from "$1" --to cudnn --mode "$2" --input-size 2 --hidden-size 3 \
        --svg "docs/gallery/$1-$2-to-cudnn.svg" --force
done
