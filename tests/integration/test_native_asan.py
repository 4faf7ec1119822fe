"""The C code (gateway/amqp/native/, gateway/pulsar/native/) under AddressSanitizer: both
modules built with ``-fsanitize=address`` (``STARLIGHT_NATIVE_SANITIZE=address``, into a cache
of this test's own) run a short workload (tests/support/asan_workload.py) in a Python with
gcc's libasan preloaded, against the local Pulsar; any ASan report fails the test. Skipped,
saying why, where gcc or libasan is missing."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from gateway import native_build
from gateway.amqp import compiled as amqp_compiled
from gateway.pulsar import compiled as pulsar_compiled
from tests.conftest import StackEndpoints

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WORKLOAD_SECONDS = 50


CANARY = """
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
static PyObject *overflow(PyObject *m, PyObject *a) {
    volatile char *p = malloc(8);
    p[8] = 1;
    free((void *)p);
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {{"overflow", overflow, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_asan_canary", NULL, -1, methods};
PyMODINIT_FUNC PyInit__asan_canary(void) { return PyModule_Create(&def); }
"""


def _asan_env(libasan: Path) -> dict[str, str]:
    return {
        **os.environ,
        "LD_PRELOAD": str(libasan),
        # Python itself is not instrumented and keeps memory to its exit: leaks say nothing.
        # libpulsar is not instrumented either: its new/delete pairs are not ours to judge.
        "ASAN_OPTIONS": "detect_leaks=0:alloc_dealloc_mismatch=0:halt_on_error=1:exitcode=86",
    }


def test_the_compiled_modules_run_clean_under_asan(
    pulsar_stack: StackEndpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    libasan = native_build.asan_library()
    if libasan is None:
        pytest.skip("no gcc with libasan here (gcc -print-file-name=libasan.so): ASan not run")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(native_build.SANITIZE_ENV, "address")
    for module in (amqp_compiled, pulsar_compiled):
        built = module.build()
        assert str(tmp_path) in str(built)  # never the cache the gateway loads from
        assert b"__asan_init" in built.read_bytes(), f"{built.name} is not instrumented"
    # The harness catches a report: a module with a heap overflow, run the same way.
    canary = tmp_path / "canary.c"
    canary.write_text(CANARY)
    canary_module = tmp_path / "_asan_canary.so"
    native_build.compile_extension([canary], canary_module)
    caught = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(tmp_path)!r}); "
            "import _asan_canary; _asan_canary.overflow()",
        ],
        env=_asan_env(libasan),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert "heap-buffer-overflow" in caught.stderr and caught.returncode == 86, caught.stderr
    topics = [f"persistent://public/default/asan-{uuid.uuid4().hex[:8]}-{i}" for i in (1, 2)]
    env = _asan_env(libasan)
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.asan_workload", pulsar_stack.broker_url, *topics],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=WORKLOAD_SECONDS,
        check=False,
    )
    report = result.stderr[-6000:]
    assert "AddressSanitizer" not in result.stderr, f"ASan reported:\n{report}"
    assert result.returncode == 0, f"the workload failed ({result.returncode}):\n{report}"
    assert "workload done" in result.stdout
