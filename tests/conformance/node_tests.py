#!/usr/bin/env python3
"""ONNX backend node-test conformance check for dtc.

Usage:
    python3 tests/conformance/node_tests.py --dtc build/bin/dtc [--jobs N]
        [--filter SUBSTR] [--expect-failures FILE | --no-expect-failures]
        [--expect-runtime-failures FILE] [--import-only] [-v]

For every test in onnx/backend/test/data/node that dtc claims to support, this
runs `dtc import model.onnx` and checks that the signature of the emitted
`func.func @main` has exactly the result shapes and element types of the
reference outputs: a check of the importer and of shape/type inference, which
is the part every later stage depends on.

Every test that imports is then compiled (`dtc compile`, the same --freeze
arguments) and run (`dtc run --threads 1`) on each of its test_data_set_*/,
and every output is compared with the reference output_<i>.pb: dtype and
shape exactly, integers and bools exactly, floats by np.allclose(rtol=1e-4,
atol=1e-5; f16 and bf16 outputs to two of their ulps) with NaNs in the same
places. --import-only skips this.

Tests dtc does not claim to support (op not in `dtc import --list-ops`, opset
outside `dtc import --list-opsets`, foreign domains, model-local functions,
non-tensor graph I/O) are skipped rather than failed, so the pass rate tracks
real regressions instead of the size of the op list.

Known, understood failures are listed per stage: known_failures.txt for the
import check, known_runtime_failures.txt for compile/run/numerics, one
'test_name  # reason' per line. A listed test that passes fails the run
("unexpectedly passed"), so the lists stay honest.

Exit status: 0 if nothing failed, 1 if any test failed (including an
unexpected pass of a listed known failure), 2 if dtc could not be queried at
all.
"""

import argparse
import collections
import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import tempfile

import onnx
from onnx import TensorProto

SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(SCRIPT_DIR, "..", "numerics"))
from dtc_cli import Comparison, DtcCli, DtcError, first_line, read_tensor  # noqa: E402

DEFAULT_DOMAINS = ("", "ai.onnx")
DEFAULT_KNOWN_FAILURES = os.path.join(SCRIPT_DIR, "known_failures.txt")
DEFAULT_KNOWN_RUNTIME_FAILURES = os.path.join(SCRIPT_DIR, "known_runtime_failures.txt")

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


# (op type, input index) of float inputs that decide an output's shape.
SHAPING_FLOAT_INPUTS = {("Resize", 1), ("Resize", 2)}


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
    """Return the NodeTest for a test dir, or raise SkipTest(category, detail)."""
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

    frozen, fed = split_inputs(test_dir, model)
    return NodeTest(test_dir, expected_outputs(test_dir, model), frozen, fed)


class NodeTest:
    """A node test dtc claims to support, with what checking it needs."""

    def __init__(self, test_dir, expected, frozen, fed):
        self.dir = test_dir
        self.expected = expected  # [(output name, shape, MLIR element type)]
        self.frozen = frozen      # [(input name, input index)]: --freeze'd
        self.fed = fed            # [input index]: the plan's inputs, in order

    def data_sets(self):
        return sorted(d for d in os.listdir(self.dir) if d.startswith("test_data_set_"))

    def freeze_args(self, data_set):
        return [(name, os.path.join(self.dir, data_set, f"input_{i}.pb"))
                for name, i in self.frozen]


def split_inputs(test_dir, model):
    """Integer, bool and scalar inputs are bound to their test values with --freeze.

    Node tests feed shapes, axes, split sizes and the like as graph inputs;
    dtc compiles static shapes, so those must be constants at import. Float
    inputs stay runtime inputs. Returns ([(name, input index)] to freeze,
    [input index] fed at run time); input_<i>.pb is the i-th graph input that
    is not an initializer.
    """
    initializers = {t.name for t in model.graph.initializer}
    # Float inputs that set a shape (Resize's roi and scales) are frozen too.
    shaping = {node.input[i] for node in iter_nodes(model.graph)
               for (op, i) in SHAPING_FLOAT_INPUTS if node.op_type == op and len(node.input) > i}
    data_dir = os.path.join(test_dir, "test_data_set_0")
    frozen, fed = [], []
    index = 0
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        path = os.path.join(data_dir, f"input_{index}.pb")
        tt = vi.type.tensor_type
        scalar = tt.HasField("shape") and len(tt.shape.dim) == 0
        if ((tt.elem_type in FROZEN_ELEMENT_TYPES or scalar or vi.name in shaping)
                and os.path.exists(path)):
            frozen.append((vi.name, index))
        else:
            fed.append(index)
        index += 1
    return frozen, fed


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
def check_import(dtc, test, timeout):
    """Return None if the import has the expected signature, else a one-line reason."""
    cmd = [dtc, "import", os.path.join(test.dir, "model.onnx")]
    for name, path in test.freeze_args("test_data_set_0"):
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
    return compare_signature(results, test.expected)


# Stages of the runtime check, in order; a test's outcome is the stage it
# failed at (with the reason) or PASSED.
COMPILE, RUN, NUMERICS, PASSED = "compile", "run", "numerics", "passed"


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def check_runtime(dtc, test, work):
    """Compile and run `test` on each data set; return (stage, reason or None)."""
    model = os.path.join(test.dir, "model.onnx")
    plans = {}  # frozen input bytes -> plan: data sets may freeze other values
    for data_set in test.data_sets():
        data_dir = os.path.join(test.dir, data_set)
        freeze = test.freeze_args(data_set)
        key = tuple(read_bytes(path) for _, path in freeze)
        if key not in plans:
            plans[key] = os.path.join(work, f"plan{len(plans)}.dtcp")
            try:
                dtc.compile(model, plans[key], frozen=freeze)
            except DtcError as e:
                return COMPILE, str(e)
        # The plan's inputs are the fed ones, renumbered: stage them so.
        inputs = os.path.join(work, data_set + "_in")
        outputs = os.path.join(work, data_set + "_out")
        os.makedirs(inputs)
        for j, i in enumerate(test.fed):
            src = os.path.join(data_dir, f"input_{i}.pb")
            if os.path.exists(src):
                os.symlink(src, os.path.join(inputs, f"input_{j}.pb"))
        try:
            dtc.run(plans[key], inputs, outputs, threads=1)
        except DtcError as e:
            return RUN, f"{data_set}: {e}"
        for i, (name, _, _) in enumerate(test.expected):
            want_path = os.path.join(data_dir, f"output_{i}.pb")
            if not os.path.exists(want_path):
                continue
            got_path = os.path.join(outputs, f"output_{i}.pb")
            if not os.path.exists(got_path):
                return RUN, f"{data_set}: dtc run wrote no output_{i}.pb"
            c = Comparison(read_tensor(got_path), read_tensor(want_path))
            if c.error:
                return NUMERICS, f"{data_set} output {i} ({name}): {c.error}"
    return PASSED, None


def run_test(dtc_cli, test, timeout, runtime):
    """Return (import failure reason or None, runtime outcome or None)."""
    reason = check_import(dtc_cli.path, test, timeout)
    if reason is not None or not runtime:
        return reason, None
    with tempfile.TemporaryDirectory(prefix="dtc-node-") as work:
        try:
            stage, reason = check_runtime(dtc_cli, test, work)
        except Exception as e:  # a broken output file, an unreadable dtype, ...
            stage, reason = NUMERICS, f"{type(e).__name__}: {e}"
        # The temporary directory means nothing once it is gone.
        return None, (stage, reason and reason.replace(work + os.sep, ""))


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
def judge(outcomes, known, known_path, verbose, label):
    """Prints FAIL/XPASS lines; returns (passed, failed, xfailed).

    outcomes: name -> None (passed) or a reason; known: the known failures,
    read from known_path.
    """
    passed = failed = xfailed = 0
    for name in sorted(outcomes):
        reason = outcomes[name]
        if name in known:
            if reason is None:
                print(f"XPASS {name}: {label} unexpectedly passed; drop it from "
                      f"{os.path.basename(known_path or 'the known failures')}")
                failed += 1
            else:
                xfailed += 1
                if verbose:
                    print(f"XFAIL {name}: {reason}")
        elif reason is None:
            passed += 1
        else:
            print(f"FAIL {name}: {reason}")
            failed += 1
    return passed, failed, xfailed


def note_stale(known, tried, name_filter, what):
    stale = sorted(n for n in known if n not in tried and name_filter in n)
    if stale:
        print(f"note: {len(stale)} {what} entries were not tried: "
              + ", ".join(stale[:10]) + (" ..." if len(stale) > 10 else ""))


def main():
    ap = argparse.ArgumentParser(description="ONNX backend node-test conformance check for dtc.")
    ap.add_argument("--dtc", required=True, help="path to the dtc binary")
    ap.add_argument("--jobs", "-j", type=int, default=min(4, os.cpu_count() or 1),
                    help="tests checked at once (default: cores, at most 4)")
    ap.add_argument("--filter", default="", help="only tests whose name contains this")
    ap.add_argument("--expect-failures", metavar="FILE",
                    help="known import failures, one 'test_name  # reason' per line "
                         f"(default: {os.path.relpath(DEFAULT_KNOWN_FAILURES)} if it exists)")
    ap.add_argument("--no-expect-failures", action="store_true",
                    help="ignore the default known-failure files")
    ap.add_argument("--expect-runtime-failures", metavar="FILE",
                    help="known compile/run/numerics failures, same format (default: "
                         f"{os.path.relpath(DEFAULT_KNOWN_RUNTIME_FAILURES)} if it exists)")
    ap.add_argument("--import-only", action="store_true",
                    help="check the import only; do not compile and run")
    ap.add_argument("--timeout", type=float, default=60, help="seconds per dtc command")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="also print XFAIL lines and every skipped test")
    args = ap.parse_args()

    def known_list(path, default):
        if path is None and not args.no_expect_failures and os.path.exists(default):
            path = default
        return (load_known_failures(path) if path else {}), path

    known, known_path = known_list(args.expect_failures, DEFAULT_KNOWN_FAILURES)
    known_runtime, known_runtime_path = known_list(args.expect_runtime_failures,
                                                   DEFAULT_KNOWN_RUNTIME_FAILURES)

    dtc = DtcCli(args.dtc, timeout=args.timeout)
    ops, opset_range = query_dtc(dtc.path)

    root = node_test_root()
    names = sorted(d for d in os.listdir(root)
                   if args.filter in d and os.path.exists(os.path.join(root, d, "model.onnx")))
    if not names:
        sys.exit(f"error: no node tests matching '{args.filter}' under {root}")

    tried = {}                           # name -> NodeTest
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

    runtime = not args.import_only
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {name: pool.submit(run_test, dtc, test, args.timeout, runtime)
                   for name, test in tried.items()}
        results = {name: f.result() for name, f in futures.items()}

    import_outcome = {name: r[0] for name, r in results.items()}
    passed, failed, xfailed = judge(import_outcome, known, known_path, args.verbose,
                                    "import")
    stages = {name: r[1] for name, r in results.items() if r[1] is not None}
    if runtime:
        rt_outcome = {name: None if stage == PASSED else f"{stage}: {reason}"
                      for name, (stage, reason) in stages.items()}
        rt_passed, rt_failed, rt_xfailed = judge(rt_outcome, known_runtime,
                                                 known_runtime_path, args.verbose,
                                                 "compile/run/numerics")
        # A known runtime failure whose import broke was not tried at run time.
        untried = sorted(n for n in known_runtime if n in import_outcome and n not in stages)
        for name in untried:
            print(f"note: {name} is a known runtime failure but did not import")

    if skipped:
        print("skipped: " + ", ".join(f"{c} {n}" for c, n in skipped.most_common()))
    if unsupported:
        print("most common unsupported ops: " +
              ", ".join(f"{op} ({n})" for op, n in unsupported.most_common(15)))
    note_stale(known, tried, args.filter, "known-failure")
    if runtime:
        note_stale(known_runtime, tried, args.filter, "known-runtime-failure")
    if xfailed:
        print(f"expected import failures (XFAIL): {xfailed}")
    print(f"node tests: tried {len(tried)}, imported {passed}, failed {failed}, "
          f"skipped {sum(skipped.values())}")
    if runtime:
        count = collections.Counter(stage for stage, _ in stages.values())
        compiled = len(stages) - count[COMPILE]
        ran = compiled - count[RUN]
        print(f"node tests: of {len(stages)} imported, compiled {compiled}, ran {ran}, "
              f"numerics passed {rt_passed}, failed {rt_failed}, xfail {rt_xfailed}")
        print(f"node tests: numerics passed {rt_passed} of {compiled} compiled "
              f"(xfail {rt_xfailed})")
        failed += rt_failed
        passed = rt_passed
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
