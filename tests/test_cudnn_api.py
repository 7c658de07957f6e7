"""The cuDNN backend as far as a machine without a GPU can take it.

The real libcudnn.so.9 (from the nvidia-cudnn-cu12 wheel the test extra installs)
loads, reports its version, and validates every descriptor configuration the
converters produce; every ctypes prototype and enum value is checked against the
headers that wheel ships; the no-GPU paths give the documented exit codes.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_clean_failure, cudnn_or_skip, run_cli

import rnnconv
from rnnconv.core.canonical import RNNSpec
from rnnconv.gpu import api
from rnnconv.gpu.descriptors import Descriptors, rnn_settings


@pytest.fixture(scope="module")
def cudnn() -> api.Cudnn:
    return cudnn_or_skip()


@pytest.fixture(scope="module")
def headers(cudnn) -> str:
    include = Path(cudnn.path).parent.parent / "include"  # the wheel ships its headers beside its library
    if not (include / "cudnn_adv.h").exists():
        pytest.skip("the cuDNN headers are not beside this library (not the wheel)")
    text = "\n".join((include / name).read_text() for name in api.HEADERS)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # comments out
    return re.sub(r"//[^\n]*", " ", text)


def declaration(headers: str, name: str) -> tuple[str, list[str]]:
    """The return type and parameter types of a function as the header declares it."""
    match = re.search(r"([\w\s\*]+?)\s*CUDNNWINAPI\s+" + name + r"\s*\(([^;]*?)\)\s*;", headers)
    assert match, f"{name} is not declared in the headers"
    returned = " ".join(match.group(1).split()[-3:])
    returned = re.sub(r"^.*?\b(const\s+char\s*\*|cudnnStatus_t|size_t|void)$", r"\1", returned)
    params = [" ".join(p.split()) for p in match.group(2).split(",")]
    if params in (["void"], [""]):
        params = []
    types = []
    for param in params:
        array = param.endswith("]")
        param = re.sub(r"\[\s*\]$", "", param).strip()
        type_part = re.sub(r"\b\w+$", "", param).strip()  # drop the parameter name
        types.append(normalize(type_part + (" []" if array else "")))
    return normalize(returned), types


def normalize(c_type: str) -> str:
    return " ".join(c_type.replace("*", " * ").split()).replace(" * *", " **")


def test_library_loads_and_reports_version_9(cudnn):
    assert cudnn.version >= 90000
    assert re.fullmatch(r"9\.\d+\.\d+", cudnn.version_text)


@pytest.mark.parametrize("name", sorted(api.PROTOTYPES))
def test_prototypes_match_the_headers(name, headers, cudnn):
    returned, params = api.PROTOTYPES[name]
    header_return, header_params = declaration(headers, name)
    assert normalize(returned) == header_return
    assert [normalize(t) for t, _ in params] == header_params, name
    function = getattr(cudnn.lib, name)
    assert len(function.argtypes) == len(params)
    assert function.restype == api.ctype_of(returned)


def test_ctypes_for_every_c_type():
    expected = {
        "cudnnHandle_t": ctypes.c_void_p,
        "cudnnHandle_t *": ctypes.POINTER(ctypes.c_void_p),
        "const cudnnTensorDescriptor_t": ctypes.c_void_p,
        "cudnnDataType_t": ctypes.c_int,
        "cudnnDataType_t *": ctypes.POINTER(ctypes.c_int),
        "int32_t": ctypes.c_int32,
        "uint32_t": ctypes.c_uint32,
        "size_t": ctypes.c_size_t,
        "size_t *": ctypes.POINTER(ctypes.c_size_t),
        "float": ctypes.c_float,
        "unsigned long long": ctypes.c_ulonglong,
        "void *": ctypes.c_void_p,
        "const void *": ctypes.c_void_p,
        "void **": ctypes.POINTER(ctypes.c_void_p),
        "const int []": ctypes.POINTER(ctypes.c_int),
        "const int32_t []": ctypes.POINTER(ctypes.c_int32),
        "int []": ctypes.POINTER(ctypes.c_int),
        "char *": ctypes.c_char_p,
        "const char *": ctypes.c_char_p,
        "void": None,
        "int": ctypes.c_int,
        "int *": ctypes.POINTER(ctypes.c_int),
    }
    for name in api.OPAQUE:  # handles and descriptors are pointers to opaque structs
        expected[name] = ctypes.c_void_p
        expected[name + " *"] = ctypes.POINTER(ctypes.c_void_p)
    for name in api.ENUMS:  # C enums are ints
        expected[name] = ctypes.c_int
        expected[name + " *"] = ctypes.POINTER(ctypes.c_int)
    used = {normalize(t) for r, params in api.PROTOTYPES.values() for t in [r] + [p for p, _ in params]}
    assert used <= {normalize(t) for t in expected}, used - {normalize(t) for t in expected}
    for c_type, ctype in expected.items():
        assert api.ctype_of(c_type) == ctype, c_type
    # pointers are 64-bit wide through these types (ctypes would truncate an undeclared int return)
    assert ctypes.sizeof(api.ctype_of("void *")) == 8


ENUMS = {
    **{f"CUDNN_DATA_{n}": v for n, v in (("FLOAT", 0), ("DOUBLE", 1), ("HALF", 2), ("BFLOAT16", 9))},
    "CUDNN_DEFAULT_MATH": api.MATH["default"],
    "CUDNN_TENSOR_OP_MATH": api.MATH["tensor_op"],
    "CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION": api.MATH["tensor_op_allow_conversion"],
    "CUDNN_FMA_MATH": api.MATH["fma"],
    "CUDNN_RNN_RELU": api.RNN_MODE["rnn_relu"],
    "CUDNN_RNN_TANH": api.RNN_MODE["rnn_tanh"],
    "CUDNN_LSTM": api.RNN_MODE["lstm"],
    "CUDNN_GRU": api.RNN_MODE["gru"],
    "CUDNN_RNN_NO_BIAS": api.BIAS_MODE["none"],
    "CUDNN_RNN_SINGLE_INP_BIAS": api.BIAS_MODE["single_input"],
    "CUDNN_RNN_DOUBLE_BIAS": api.BIAS_MODE["double"],
    "CUDNN_RNN_SINGLE_REC_BIAS": api.BIAS_MODE["single_recurrent"],
    "CUDNN_UNIDIRECTIONAL": api.DIRECTION[False],
    "CUDNN_BIDIRECTIONAL": api.DIRECTION[True],
    "CUDNN_LINEAR_INPUT": api.INPUT_MODE["linear"],
    "CUDNN_SKIP_INPUT": api.INPUT_MODE["skip"],
    "CUDNN_RNN_ALGO_STANDARD": api.ALGO_STANDARD,
    "CUDNN_FWD_MODE_INFERENCE": api.FWD_MODE_INFERENCE,
    "CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED": api.DATA_LAYOUT["seq_major_unpacked"],
    "CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED": api.DATA_LAYOUT["seq_major_packed"],
    "CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED": api.DATA_LAYOUT["batch_major_unpacked"],
    "CUDNN_STATUS_SUCCESS": api.STATUS_SUCCESS,
}


@pytest.mark.parametrize("name", sorted(ENUMS))
def test_enum_values_match_the_headers(name, headers):
    match = re.search(r"\b" + name + r"\s*(?:CUDNN_DEPRECATED_ENUM\s*)?=\s*(\d+)", headers)
    assert match, f"{name} is not in the headers"
    assert int(match.group(1)) == ENUMS[name]


def test_padded_io_flag_matches_the_header(headers):
    assert re.search(r"#define\s+CUDNN_RNN_PADDED_IO_ENABLED\s+\(1U\s*<<\s*0\)", headers)
    assert api.PADDED_IO_ENABLED == 1


def specs_the_converters_produce() -> list[RNNSpec]:
    specs = []
    for mode, layers, bidirectional, dtype in itertools.product(
        ("lstm", "gru", "rnn_tanh", "rnn_relu"), (1, 2, 3), (False, True), ("float32", "float16", "bfloat16", "float64")
    ):
        for proj in (0, 3) if mode == "lstm" else (0,):
            specs.append(RNNSpec(mode, 5, 7, layers, bidirectional, proj, dtype))
    return specs


@pytest.mark.parametrize("spec", specs_the_converters_produce(), ids=lambda s: s.describe())
def test_every_converter_configuration_is_a_valid_cudnn_descriptor(spec, cudnn):
    """cuDNN's set-calls validate their arguments without a GPU: a wrong enum or size fails here."""
    with Descriptors(cudnn, spec, batch=3, steps=6, lengths=np.array([6, 4, 1])) as desc:
        assert desc.rnn.value and desc.x.value and desc.y.value and desc.h.value and desc.c.value


def test_cudnn_rejects_what_it_cannot_do_and_the_error_names_the_call(cudnn):
    settings = rnn_settings(RNNSpec("gru", 5, 7))
    handle = ctypes.c_void_p()
    cudnn.call("cudnnCreateRNNDescriptor", ctypes.byref(handle))
    try:
        bad = dict(settings.__dict__, projSize=3)  # GRU with a projection: NOT_SUPPORTED
        with pytest.raises(
            api.CudnnError, match=r"cudnnSetRNNDescriptor_v8 failed: CUDNN_STATUS_NOT_SUPPORTED"
        ) as refused:
            cudnn.call("cudnnSetRNNDescriptor_v8", handle, *bad.values(), None, 0)
        assert refused.value.exit_code == 2  # an unsupported configuration is bad input, not a missing backend
        zero_proj = dict(settings.__dict__, projSize=0)  # projSize 0 is BAD_PARAM, with cuDNN's own reason
        with pytest.raises(api.CudnnError, match=r"CUDNN_STATUS_BAD_PARAM \(2000\): projSize <= 0"):
            cudnn.call("cudnnSetRNNDescriptor_v8", handle, *zero_proj.values(), None, 0)
    finally:
        cudnn.lib.cudnnDestroyRNNDescriptor(handle)


def test_no_gpu_handle_fails_with_a_sentence(cudnn):
    from rnnconv.gpu.backend import probe

    if probe().ok:
        pytest.skip("this machine has a GPU")
    handle = ctypes.c_void_p()
    with pytest.raises(api.CudnnError, match=r"cudnnCreate failed: CUDNN_STATUS_NOT_INITIALIZED \(1001\)") as failed:
        cudnn.call("cudnnCreate", ctypes.byref(handle))
    assert failed.value.exit_code == 3 and "\n" not in str(failed.value)


def test_probe_says_what_is_missing_and_what_was_found(cudnn):
    from rnnconv.gpu.backend import probe

    status = probe()
    if status.ok:
        pytest.skip("this machine has a GPU")
    assert status.found["cudnn_version"] == cudnn.version_text
    assert f"cudnn_version {cudnn.version_text}" in status.reason


@pytest.mark.slow
def test_doctor_and_gpu_battery_without_a_gpu(cudnn, tmp_path):
    result = run_cli("doctor", "--json")
    assert result.returncode == 0, result.stderr
    import json

    report = json.loads(result.stdout)
    assert report["backends"]["numpy"]["available"]
    assert report["backends"]["cudnn"]["found"]["cudnn_version"] == cudnn.version_text
    from rnnconv.gpu.backend import probe

    if probe().ok:
        pytest.skip("this machine has a GPU")
    assert not report["backends"]["cudnn"]["available"]
    assert_clean_failure(run_cli("gpu-battery", "-o", tmp_path / "x.json"), 3, "the GPU battery needs cuDNN on a GPU")
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_a_missing_library_makes_the_cudnn_backend_exit_3(tmp_path):
    from conftest import FIXTURES

    blob = tmp_path / "x.bin"
    rnnconv.convert(FIXTURES / "torch" / "rnn_tanh.pt", blob, to="cudnn")
    result = run_cli("verify", blob, "--backend", "cudnn", env={"RNNCONV_CUDNN_LIBRARY": str(tmp_path / "nope.so")})
    assert_clean_failure(result, 3, "libcudnn.so.9 was not found", "nope.so")


def test_libcudnn_is_found_in_either_wheels_layout(cudnn, tmp_path):
    """nvidia-cudnn-cu12 and -cu13 both put it in nvidia/cudnn/lib; any nvidia/*/lib is looked in too."""
    import subprocess
    import sys

    for layout in ("nvidia/cudnn/lib", "nvidia/cu13/lib"):
        site = tmp_path / layout.replace("/", "_")
        (site / layout).parent.mkdir(parents=True)
        (site / layout).symlink_to(Path(cudnn.path).resolve().parent)  # its sub-libraries beside it, as installed
        code = "from rnnconv.gpu import api; print(*api.library_candidates()); print(api.Cudnn().version_text)"
        env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        env.pop("RNNCONV_CUDNN_LIBRARY", None)
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert result.returncode == 0, result.stderr
        candidates, version = result.stdout.splitlines()
        assert str(site / layout / "libcudnn.so.9") in candidates.split() and version == cudnn.version_text
        if layout == "nvidia/cudnn/lib":  # first on the path: the one that loads
            assert candidates.split()[0] == str(site / layout / "libcudnn.so.9")
