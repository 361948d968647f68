"""Drive `dtc compile` / `dtc run` from Python and compare tensors.

Shared by tests/numerics/compare_models.py, tests/conformance/node_tests.py
and bench/inference.py, so that all three write inputs, read outputs and judge
closeness the same way.
"""

import os
import re
import signal
import subprocess

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

# What "the same numbers" means everywhere: np.allclose's rule.
RTOL = 1e-4
ATOL = 1e-5


class DtcError(Exception):
    """A dtc command failed; str() is one line saying which and why."""


def first_line(text):
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _describe_exit(cmd, p):
    reason = first_line(p.stderr) or first_line(p.stdout)
    if p.returncode < 0:
        try:
            sig = signal.Signals(-p.returncode).name
        except ValueError:
            sig = f"signal {-p.returncode}"
        return f"dtc {cmd} crashed ({sig})" + (f": {reason}" if reason else "")
    return f"dtc {cmd}: " + (reason or f"exit status {p.returncode} (no output)")


class DtcCli:
    """The dtc binary, one method per subcommand used here."""

    def __init__(self, path, timeout=120):
        self.path = os.path.abspath(path) if os.sep in path else path
        self.timeout = timeout

    def _call(self, cmd, args):
        try:
            p = subprocess.run([self.path, cmd] + args, capture_output=True, text=True,
                               errors="replace", timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise DtcError(f"dtc {cmd} timed out after {self.timeout} s") from None
        except OSError as e:
            raise DtcError(f"cannot run {self.path}: {e}") from None
        if p.returncode != 0:
            raise DtcError(_describe_exit(cmd, p))
        return p.stdout

    def compile(self, model, plan, shapes=(), frozen=()):
        """shapes: 'NAME=DIMS' strings; frozen: (input name, TensorProto file) pairs."""
        args = [model, "-o", plan]
        for s in shapes:
            args += ["--shape", s]
        for name, path in frozen:
            args += ["--freeze", f"{name}={path}"]
        return self._call("compile", args)

    def run(self, plan, inputs_dir, outputs_dir, threads=None, output_format="pb",
            repeat=0):
        """Runs a plan; returns the median latency in ms when repeat > 0, else None."""
        args = [plan, "--inputs", inputs_dir, "--outputs", outputs_dir,
                "--output-format", output_format]
        if threads is not None:
            args += ["--threads", str(threads)]
        if repeat:
            args += ["--repeat", str(repeat)]
        out = self._call("run", args)
        if not repeat:
            return None
        m = re.search(r"median ([0-9.]+) ms", out)
        if not m:
            raise DtcError(f"dtc run --repeat printed no median: {first_line(out)!r}")
        return float(m.group(1))


def write_tensor(path, array, name=""):
    """Writes `array` as a TensorProto (.pb) or NumPy (.npy) file, by extension."""
    if path.endswith(".npy"):
        np.save(path, array)
    else:
        with open(path, "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(array), name).SerializeToString())


def read_tensor(path):
    """Reads a .pb (TensorProto) or .npy file into a numpy array."""
    if path.endswith(".npy"):
        return np.load(path, allow_pickle=False)
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def read_outputs(outputs_dir, count, ext="pb"):
    """dtc's outputs output_0..output_{count-1}; a missing file is a DtcError."""
    arrays = []
    for i in range(count):
        path = os.path.join(outputs_dir, f"output_{i}.{ext}")
        if not os.path.exists(path):
            raise DtcError(f"dtc run wrote no {os.path.basename(path)}")
        arrays.append(read_tensor(path))
    return arrays


class Comparison:
    """How far `got` is from `want`: .error is None when they agree."""

    def __init__(self, got, want, rtol=RTOL, atol=ATOL):
        self.max_abs = self.max_rel = 0.0
        self.error = self._compare(np.asarray(got), np.asarray(want), rtol, atol)

    def _compare(self, got, want, rtol, atol):
        if got.dtype != want.dtype:
            return f"dtype {got.dtype} != expected {want.dtype}"
        if got.shape != want.shape:
            return f"shape {got.shape} != expected {want.shape}"
        if got.size == 0:
            return None
        # ml_dtypes' bfloat16 is kind "V" to numpy, but a float.
        if want.dtype.kind not in "fc" and want.dtype.name != "bfloat16":
            # Integers and bools are exact; a tolerance would hide off-by-ones.
            wrong = got != want
            if wrong.any():
                i = np.unravel_index(np.argmax(wrong), want.shape)
                return (f"{int(wrong.sum())} of {want.size} elements differ; first at "
                        f"{tuple(int(x) for x in i)}: {got[i]!r} != expected {want[i]!r}")
            return None
        # Comparisons in float64: exact for f16/bf16/f32, and numpy has no
        # arithmetic for bf16.
        g = got.astype(np.complex128 if want.dtype.kind == "c" else np.float64)
        w = want.astype(g.dtype)
        nan_g, nan_w = np.isnan(g), np.isnan(w)
        if (nan_g != nan_w).any():
            i = np.unravel_index(np.argmax(nan_g != nan_w), want.shape)
            return (f"NaN positions differ ({int((nan_g != nan_w).sum())} elements); first "
                    f"at {tuple(int(x) for x in i)}: {got[i]!r}, expected {want[i]!r}")
        finite = np.isfinite(g) & np.isfinite(w)
        if finite.any():
            diff = np.abs(g[finite] - w[finite])
            self.max_abs = float(diff.max())
            self.max_rel = float((diff / np.maximum(np.abs(w[finite]), 1e-30)).max())
        # Half-precision outputs: a result computed in f32 and rounded once
        # may sit an ulp from a reference rounded at every step, and rtol
        # 1e-4 is below f16's own rounding (2^-11): two of its ulps.
        if want.dtype.name in ("float16", "bfloat16"):
            rtol = max(rtol, 2 * float(ml_dtypes.finfo(want.dtype).eps))
        close = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        if not close.all():
            i = np.unravel_index(np.argmax(~close), want.shape)
            return (f"{int((~close).sum())} of {want.size} elements differ beyond "
                    f"rtol={rtol:g} atol={atol:g} (max abs {self.max_abs:.3g}, max rel "
                    f"{self.max_rel:.3g}); first at {tuple(int(x) for x in i)}: "
                    f"{got[i]!r} != expected {want[i]!r}")
        return None
