"""protoc's Python code for plan/plan.proto, for the test tools that write
plans by hand (pipeline_plan.py, edit_plan.py)."""
import importlib
import os
import subprocess
import sys

PROTO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "plan")


def load(tmp):
    """Generates plan_pb2 into the folder `tmp` and imports it."""
    subprocess.run(["protoc", f"--python_out={tmp}", f"-I{PROTO}",
                    os.path.join(PROTO, "plan.proto")], check=True)
    sys.path.insert(0, tmp)
    return importlib.import_module("plan_pb2")
