#!/usr/bin/env python3
"""ONNX backend node-test conformance check for dtc.

Usage:
    python3 tests/conformance/node_tests.py --dtc build/bin/dtc [--jobs N]
        [--filter SUBSTR] [--expect-failures FILE | --no-expect-failures] [-v]

For every test in onnx/backend/test/data/node that dtc claims to support, this
runs `dtc import model.onnx` and checks that the signature of the emitted
`func.func @main` has exactly the result shapes and element types of the
reference outputs. It does not execute anything: it is a check of the importer
and of shape/type inference, which is the part every later stage depends on.

Tests dtc does not claim to support (op not in `dtc import --list-ops`, opset
outside `dtc import --list-opsets`, foreign domains, model-local functions,
non-tensor graph I/O) are skipped rather than failed, so the pass rate tracks
real regressions instead of the size of the op list.

Exit status: 0 if nothing failed, 1 if any test failed (including an XPASS of
a listed known failure), 2 if dtc could not be queried at all.
"""

import argparse
import collections
import concurrent.futures
import os
import re
import signal
import subprocess
import sys

import onnx
from onnx import TensorProto

DEFAULT_DOMAINS = ("", "ai.onnx")
SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULT_KNOWN_FAILURES = os.path.join(SCRIPT_DIR, "known_failures.txt")

# ONNX element type -> MLIR builtin element type spelling. Keyed on the
# TensorProto enum rather than numpy dtypes because the enum covers types
# numpy has no native dtype for (bfloat16, float8, int4), and the expected
# outputs can then be checked from the protobuf header without decoding data.
# getattr() keeps this working on onnx versions that lack the newer enums.
_ELEM_TYPE_NAMES = {
    "FLOAT": "f32", "DOUBLE": "f64", "FLOAT16": "f16", "BFLOAT16": "bf16",
    "INT64": "i64", "INT32": "i32", "INT16": "i16", "INT8": "i8",
    "UINT64": "ui64", "UINT32": "ui32", "UINT16": "ui16", "UINT8": "ui8",
    "BOOL": "i1",
    "COMPLEX64": "complex<f32>", "COMPLEX128": "complex<f64>",
    "FLOAT8E4M3FN": "f8E4M3FN", "FLOAT8E4M3FNUZ": "f8E4M3FNUZ",
    "FLOAT8E5M2": "f8E5M2", "FLOAT8E5M2FNUZ": "f8E5M2FNUZ",
    "FLOAT8E8M0": "f8E8M0FNU", "FLOAT4E2M1": "f4E2M1FN",
    "INT4": "i4", "UINT4": "ui4", "INT2": "i2", "UINT2": "ui2",
}
ONNX_TO_MLIR = {
    getattr(TensorProto, k): v for k, v in _ELEM_TYPE_NAMES.items() if hasattr(TensorProto, k)
}


class SkipTest(Exception):
    """Raised while classifying a test; args = (category, detail)."""


# ---------------------------------------------------------------------------
# Talking to dtc
# ---------------------------------------------------------------------------
def query_dtc(dtc):
    """Return (set of supported op types, (min_opset, max_opset))."""
    def run(flag):
        try:
            p = subprocess.run([dtc, "import", flag], capture_output=True, text=True,
                               timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            sys.exit(f"error: cannot run '{dtc} import {flag}': {e}")
        if p.returncode != 0:
            sys.exit(f"error: '{dtc} import {flag}' exited with {p.returncode}: "
                     f"{first_line(p.stderr)}")
        return p.stdout

    ops = {line.strip() for line in run("--list-ops").splitlines() if line.strip()}
    fields = run("--list-opsets").split()
    try:
        lo, hi = int(fields[0]), int(fields[1])
    except (IndexError, ValueError):
        sys.exit(f"error: cannot parse '{dtc} import --list-opsets' output {fields!r}; "
                 "expected 'MIN MAX'")
    return ops, (lo, hi)


def first_line(text):
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


# ---------------------------------------------------------------------------
# MLIR signature parsing
# ---------------------------------------------------------------------------
# The importer prints ordinary (pretty) MLIR, so a tiny bracket-aware scanner
# is enough; pulling in MLIR's Python bindings would make this script depend on
# the build. The scanner must respect nesting because result types and
# attributes contain commas and brackets (tensor<2x3xf32, #enc>,
# {graph.name = "a,b"}, complex<f32>), and must not mistake the '>' of an
# '->' inside an attribute for a closing angle bracket.
_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}
_CLOSE = set(_OPEN.values())


def _scan(s, start, stop_at):
    """Walk s from start, tracking nesting and string literals.

    Returns the index of the first character at nesting depth 0 for which
    stop_at(ch) is true, or len(s). Closing brackets that would take the depth
    below 0 also stop the scan (that is how the end of an enclosing list is
    found).
    """
    depth = 0
    i = start
    n = len(s)
    while i < n:
        ch = s[i]
        if ch == '"':
            i += 1
            while i < n and s[i] != '"':
                i += 2 if s[i] == "\\" else 1
        elif ch == "-" and s.startswith("->", i):
            if depth == 0 and stop_at(ch):
                return i
            i += 1  # skip the '>' of the arrow
        elif depth == 0 and stop_at(ch):
            return i
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            if depth == 0:
                return i
            depth -= 1
        i += 1
    return n


def _split_top_level(s):
    """Split a comma-separated list at depth 0."""
    parts, i = [], 0
    while i <= len(s):
        j = _scan(s, i, lambda c: c == ",")
        part = s[i:j].strip()
        if part:
            parts.append(part)
        i = j + 1
    return parts


def _strip_attrs(item):
    """'tensor<2xf32> {graph.name = "y"}' -> 'tensor<2xf32>'."""
    return item[:_scan(item, 0, lambda c: c == "{" or c.isspace())].strip()


_MAIN_RE = re.compile(r"func\.func\s+(?:(?:public|private|nested)\s+)?@main\s*\(")


def parse_main_results(mlir):
    """Return the list of result type strings of func.func @main.

    Raises ValueError if the signature cannot be found or parsed.
    """
    m = _MAIN_RE.search(mlir)
    if not m:
        raise ValueError("no 'func.func @main(' in dtc output")
    args_end = _scan(mlir, m.end(), lambda c: False)  # matching ')'
    if args_end >= len(mlir):
        raise ValueError("unterminated argument list of @main")
    rest = mlir[args_end + 1:].lstrip()
    if not rest.startswith("->"):
        return []  # a function without results: `func.func @main(...) {`
    rest = rest[2:].lstrip()
    if rest.startswith("("):
        end = _scan(rest, 1, lambda c: False)
        if end >= len(rest):
            raise ValueError("unterminated result list of @main")
        return [_strip_attrs(item) for item in _split_top_level(rest[1:end])]
    # Single result without attributes: `-> tensor<...> {` or `-> tensor<...> attributes {`.
    return [_strip_attrs(rest)]


_DIM_RE = re.compile(r"(\d+|\?)x")


def parse_tensor_type(t):
    """'tensor<2x?x4xf32>' -> ((2, None, 4), 'f32'); 'tensor<f32>' -> ((), 'f32').

    Returns None for anything that is not a ranked tensor type.
    """
    if not (t.startswith("tensor<") and t.endswith(">")):
        return None
    inner = t[len("tensor<"):-1]
    inner = inner[:_scan(inner, 0, lambda c: c == ",")].strip()  # drop encoding
    if inner.startswith("*"):
        return None  # unranked
    dims = []
    pos = 0
    while True:
        m = _DIM_RE.match(inner, pos)
        if not m:
            break
        dims.append(None if m.group(1) == "?" else int(m.group(1)))
        pos = m.end()
    elem = inner[pos:]
    return (tuple(dims), elem) if elem else None


def fmt_shape(shape):
    return "x".join("?" if d is None else str(d) for d in shape) if shape else "scalar"


def compare_signature(results, expected):
    """Return None if `results` (MLIR type strings) match `expected`, else a reason.

    expected: list of (output name, shape tuple, MLIR element type).
    """
    if len(results) != len(expected):
        return f"@main has {len(results)} results, expected {len(expected)}"
    for i, (got, (name, shape, elem)) in enumerate(zip(results, expected)):
        parsed = parse_tensor_type(got)
        if parsed is None:
            return f"result {i} ({name}): '{got}' is not a ranked tensor type"
        got_shape, got_elem = parsed
        if got_shape != shape:
            return (f"result {i} ({name}): shape {fmt_shape(got_shape)} != "
                    f"expected {fmt_shape(shape)}")
        if got_elem != elem:
            return f"result {i} ({name}): element type {got_elem} != expected {elem}"
    return None


# ---------------------------------------------------------------------------
# Test discovery and classification
# ---------------------------------------------------------------------------
DTC_ELEMENT_TYPES = {
    TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16,
    TensorProto.INT64, TensorProto.INT32, TensorProto.INT16, TensorProto.INT8,
    TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
    TensorProto.BOOL,
}
FROZEN_ELEMENT_TYPES = DTC_ELEMENT_TYPES - {
    TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16,
}


def node_test_root():
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")


def iter_nodes(graph):
    """All nodes, including those in If/Loop/Scan bodies: dtc must import those too."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from iter_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from iter_nodes(g)


def classify(test_dir, ops, opset_range):
    """Return the expected results of a test, or raise SkipTest(category, detail)."""
    model = onnx.load(os.path.join(test_dir, "model.onnx"), load_external_data=False)

    opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), None)
    if opset is None:
        raise SkipTest("no default-domain opset", "")
    if not opset_range[0] <= opset <= opset_range[1]:
        raise SkipTest("opset out of range", str(opset))
    if model.functions:
        raise SkipTest("model-local functions", model.functions[0].name)
    for node in iter_nodes(model.graph):
        if node.domain not in DEFAULT_DOMAINS:
            raise SkipTest("non-default domain", node.domain)
    for node in iter_nodes(model.graph):
        if node.op_type not in ops:
            raise SkipTest("unsupported op", node.op_type)
    # Sequences, optionals and maps have no counterpart in a tensor signature.
    for vi in list(model.graph.input) + list(model.graph.output):
        if vi.type.WhichOneof("value") != "tensor_type":
            raise SkipTest("non-tensor graph I/O", vi.type.WhichOneof("value") or "none")
    # dtc's element types are the IEEE floats, bf16, integers of 8 bits and
    # more, and bool; 8/4-bit floats, 4/2-bit ints and strings are out of scope.
    for vi in model.graph.input:
        if vi.type.tensor_type.elem_type not in DTC_ELEMENT_TYPES:
            raise SkipTest("unsupported element type",
                           TensorProto.DataType.Name(vi.type.tensor_type.elem_type))
    for node in iter_nodes(model.graph):
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i not in DTC_ELEMENT_TYPES:
                raise SkipTest("unsupported element type", TensorProto.DataType.Name(attr.i))

    return expected_outputs(test_dir, model), frozen_inputs(test_dir, model)


def frozen_inputs(test_dir, model):
    """Integer, bool and scalar inputs are bound to their test values with --freeze.

    Node tests feed shapes, axes, split sizes and the like as graph inputs;
    dtc compiles static shapes, so those must be constants at import. Float
    inputs stay runtime inputs.
    """
    initializers = {t.name for t in model.graph.initializer}
    data_dir = os.path.join(test_dir, "test_data_set_0")
    frozen = []
    index = 0
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        path = os.path.join(data_dir, f"input_{index}.pb")
        index += 1
        tt = vi.type.tensor_type
        scalar = tt.HasField("shape") and len(tt.shape.dim) == 0
        if (tt.elem_type in FROZEN_ELEMENT_TYPES or scalar) and os.path.exists(path):
            frozen.append((vi.name, path))
    return frozen


def expected_outputs(test_dir, model):
    """[(name, shape, mlir elem type)] in graph.output order.

    output_<i>.pb belongs to graph.output[i]. Only the header (dims, data_type)
    is needed, so the raw TensorProto is read rather than converting it with
    numpy_helper.to_array (which would decode data we never look at and needs
    ml_dtypes for the exotic types).
    """
    data_dir = os.path.join(test_dir, "test_data_set_0")
    expected = []
    for i, out in enumerate(model.graph.output):
        path = os.path.join(data_dir, f"output_{i}.pb")
        if os.path.exists(path):
            t = TensorProto()
            with open(path, "rb") as f:
                t.ParseFromString(f.read())
            shape, dtype = tuple(t.dims), t.data_type
        else:
            # No reference data: fall back to the declared type, if it pins
            # everything down.
            tt = out.type.tensor_type
            if not tt.HasField("shape") or not all(d.HasField("dim_value")
                                                   for d in tt.shape.dim):
                raise SkipTest("no static expected output", out.name)
            shape = tuple(d.dim_value for d in tt.shape.dim)
            dtype = tt.elem_type
        if dtype not in ONNX_TO_MLIR:
            raise SkipTest("unsupported element type",
                           TensorProto.DataType.Name(dtype) if dtype in
                           TensorProto.DataType.values() else str(dtype))
        expected.append((out.name, shape, ONNX_TO_MLIR[dtype]))
    return expected


# ---------------------------------------------------------------------------
# Running one test
# ---------------------------------------------------------------------------
def run_test(dtc, test_dir, expected, timeout):
    """Return None on success, else a one-line failure reason."""
    expected, frozen = expected
    cmd = [dtc, "import", os.path.join(test_dir, "model.onnx")]
    for name, path in frozen:
        cmd += ["--freeze", f"{name}={path}"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout} s"
    if p.returncode != 0:
        reason = first_line(p.stderr)
        if p.returncode < 0:
            try:
                sig = signal.Signals(-p.returncode).name
            except ValueError:
                sig = f"signal {-p.returncode}"
            return f"crashed ({sig})" + (f": {reason}" if reason else "")
        return reason or f"exit status {p.returncode} (no stderr)"
    try:
        results = parse_main_results(p.stdout)
    except ValueError as e:
        return str(e)
    return compare_signature(results, expected)


def load_known_failures(path):
    known = {}
    with open(path) as f:
        for line in f:
            name, _, reason = line.partition("#")
            name = name.strip()
            if name:
                known[name] = reason.strip()
    return known


# ---------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description="ONNX backend node-test conformance check for dtc.")
    ap.add_argument("--dtc", required=True, help="path to the dtc binary")
    ap.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--filter", default="", help="only tests whose name contains this")
    ap.add_argument("--expect-failures", metavar="FILE",
                    help="known failures, one 'test_name  # reason' per line "
                         f"(default: {os.path.relpath(DEFAULT_KNOWN_FAILURES)} if it exists)")
    ap.add_argument("--no-expect-failures", action="store_true",
                    help="ignore the default known-failures file")
    ap.add_argument("--timeout", type=float, default=60, help="seconds per dtc import")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="also print XFAIL lines and every skipped test")
    args = ap.parse_args()

    known_path = args.expect_failures
    if known_path is None and not args.no_expect_failures and os.path.exists(DEFAULT_KNOWN_FAILURES):
        known_path = DEFAULT_KNOWN_FAILURES
    known = load_known_failures(known_path) if known_path else {}

    dtc = os.path.abspath(args.dtc) if os.sep in args.dtc else args.dtc
    ops, opset_range = query_dtc(dtc)

    root = node_test_root()
    names = sorted(d for d in os.listdir(root)
                   if args.filter in d and os.path.exists(os.path.join(root, d, "model.onnx")))
    if not names:
        sys.exit(f"error: no node tests matching '{args.filter}' under {root}")

    tried = {}                           # name -> expected outputs
    skipped = collections.Counter()      # category -> count
    unsupported = collections.Counter()  # op type -> tests it blocks
    for name in names:
        try:
            tried[name] = classify(os.path.join(root, name), ops, opset_range)
        except SkipTest as e:
            category, detail = e.args
            skipped[category] += 1
            if category == "unsupported op":
                unsupported[detail] += 1
            if args.verbose:
                print(f"SKIP {name}: {category}" + (f" ({detail})" if detail else ""))

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {name: pool.submit(run_test, dtc, os.path.join(root, name), exp, args.timeout)
                   for name, exp in tried.items()}
        outcome = {name: f.result() for name, f in futures.items()}

    passed = failed = xfailed = 0
    for name in sorted(outcome):
        reason = outcome[name]
        if name in known:
            if reason is None:
                print(f"XPASS {name}")  # fixed: drop it from the list
                failed += 1
            else:
                xfailed += 1
                if args.verbose:
                    print(f"XFAIL {name}: {reason}")
        elif reason is None:
            passed += 1
        else:
            print(f"FAIL {name}: {reason}")
            failed += 1

    if skipped:
        print("skipped: " + ", ".join(f"{c} {n}" for c, n in skipped.most_common()))
    if unsupported:
        print("most common unsupported ops: " +
              ", ".join(f"{op} ({n})" for op, n in unsupported.most_common(15)))
    if known:
        stale = sorted(n for n in known if n not in tried and (args.filter in n))
        if stale:
            print(f"note: {len(stale)} known-failure entries were not tried: "
                  + ", ".join(stale[:10]) + (" ..." if len(stale) > 10 else ""))
    if xfailed:
        print(f"expected failures (XFAIL): {xfailed}")
    print(f"node tests: tried {len(tried)}, passed {passed}, failed {failed}, "
          f"skipped {sum(skipped.values())}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
