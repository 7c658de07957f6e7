"""Run blobs through cuDNN against rnnconv's numpy reference, on a GPU machine without the source's framework.

    python bench/cudnn_against_reference.py BLOB [BLOB...]

`verify --backend cudnn` runs the blob's source in its own framework; the GPU machine may lack
it (TensorFlow, onnxruntime). The numpy reference is held to those frameworks by the CI tests
(`verify --backend numpy` against Keras, ONNX and TF1 sources), so cuDNN = reference here and
reference = framework there chain into cuDNN = framework. Each blob runs with a ragged and a
full-length batch, compared as verify compares (atol + rtol * |reference|).

Exit: 0 all match, 1 a mismatch, 3 no GPU or no cuDNN (one sentence), 2 a blob that does not read.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rnnconv.errors import BackendMissing, RnnconvError
from rnnconv.formats.cudnn.reader import open_blobs
from rnnconv.gpu.backend import CudnnBackend, probe
from rnnconv.gpu.battery import check_forward


def main(paths: list[str]) -> int:
    status = probe()
    if not status.ok:
        print(f"error: cuDNN does not run here: {status.reason}", file=sys.stderr)
        return 3
    backend = CudnnBackend(status)
    worst = 0
    for path in paths:
        for blob in open_blobs(Path(path)):
            for ragged in (True, False):
                result = check_forward(backend, blob, seed=0, ragged=ragged)
                verdict = "match" if result["matches"] else "MISMATCH"
                print(
                    f"{path} {blob.name} ({blob.spec.describe()}), {'ragged' if ragged else 'full-length'}: "
                    f"{verdict}, max |cuDNN - reference| {result['max_abs_vs_numpy']:.2e} "
                    f"(atol {result['atol']:g}, rtol {result['rtol']:g}; {result['math_type']}; "
                    f"torch._cudnn_rnn: {result['torch_cudnn_rnn']})"
                )
                worst = max(worst, 0 if result["matches"] else 1)
    return worst


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BackendMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(3)
    except RnnconvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
