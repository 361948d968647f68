# Lit configuration for dtc: .mlir pass/dialect tests and .onnxtxt importer
# tests, run with FileCheck.
import os

import lit.formats

config.name = "dtc"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".onnxtxt", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.dtc_obj_root, "tests")
config.excludes = ["unit", "conformance", "fuzz", "tools", "lit.cfg.py", "CMakeLists.txt"]

bin_dir = os.path.join(config.dtc_obj_root, "bin")
config.environment["PATH"] = os.pathsep.join(
    [bin_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])])
for var in ("HOME", "PYTHONPATH"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

py = config.python_executable
src = config.dtc_src_root
config.substitutions.append(("%python", py))
config.substitutions.append(("%onnx-text", f"{py} {src}/tests/tools/onnx_text.py"))
config.substitutions.append(("%gen-models", f"{py} {src}/tests/models/generate.py"))
config.substitutions.append(("%dtc-opt", os.path.join(bin_dir, "dtc-opt")))
config.substitutions.append(("%dtc-translate", os.path.join(bin_dir, "dtc-translate")))
config.substitutions.append(("%dtc-run", os.path.join(bin_dir, "dtc-run")))
config.substitutions.append(("%dtc", os.path.join(bin_dir, "dtc")))
# The CUDA toolkit's assembler, for the PTX dtc generates (no GPU needed).
import shutil
ptxas = shutil.which("ptxas") or shutil.which("ptxas", path="/usr/local/cuda/bin")
if ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", f"{py} {src}/tests/tools/ptx_assemble.py --ptxas {ptxas}"))

# A usable NVIDIA GPU (the driver loads and sees one): tests/gpu's
# end-to-end tests need it and are reported unsupported without one.
def usable_gpu():
    import ctypes
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int(0)
        return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 \
            and count.value > 0
    except OSError:
        return False


if usable_gpu():
    config.available_features.add("gpu")
