"""Checks `dtc plan --json` against its schema (docs/plan-summary.md): the
fields and their types, the parameter count, every parameter's split naming
mesh axes the plan has, the pipeline's stages, a prediction that adds up."""
import argparse
import json

ap = argparse.ArgumentParser()
ap.add_argument("summary")
ap.add_argument("--parameters", type=int, required=True)
ap.add_argument("--ranks", type=int, required=True)
ap.add_argument("--stages", type=int, default=1)
ap.add_argument("--servers", type=int, default=0, help="parameter servers past the mesh")
ap.add_argument("--split", action="store_true", help="some parameter is split")
args = ap.parse_args()

s = json.load(open(args.summary))
assert s["schema"] == "dtc-plan-summary" and s["schema_version"] == 1, s["schema"]
for key, kind in [("plan_format", int), ("producer", str), ("model", str), ("mesh", list),
                  ("ranks", int), ("training", dict), ("parameters", list),
                  ("communication", list), ("memory", list), ("predicted", dict),
                  ("decisions", list)]:
    assert isinstance(s[key], kind), (key, type(s[key]))
assert s["ranks"] == args.ranks, s["ranks"]
size = 1
for axis in s["mesh"]:
    size *= axis["size"]
assert size + args.servers == args.ranks, s["mesh"]
servers = s["training"]["parameter_servers"] if s["training"] else None
assert (servers["servers"] if servers else 0) == args.servers, servers
assert not servers or servers["push_bytes"] > 0, servers
axes = {axis["name"] for axis in s["mesh"]}
params = s["parameters"]
assert len(params) == args.parameters, len(params)
assert len({p["name"] for p in params}) == len(params), "a parameter listed twice"
for p in params:
    assert len(p["split"]) == len(p["shape"]) and all(d > 0 for d in p["shape"]), p
    assert all(set(dim) <= axes for dim in p["split"]), p
    assert p["dtype"] in ("f32", "bf16", "f16"), p
    assert all(0 <= st < args.stages for st in p["stages"]), p
assert any(any(dim) for p in params for dim in p["split"]) == args.split, "split parameters"
pipeline = s["training"]["pipeline"]
if args.stages > 1:
    assert pipeline["stages"] == args.stages, pipeline
    assert {st for p in params for st in p["stages"]} == set(range(args.stages))
else:
    assert pipeline is None, pipeline
for c in s["communication"]:
    assert c["count"] > 0 and c["bytes"] >= 0 and set(c["axes"]) <= axes, c
    assert c["kind"] in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_slice",
                         "send", "receive"), c
assert s["communication"], "a split plan communicates"
assert len(s["memory"]) >= 1 and all(m["peak_bytes"] >= m["parameter_bytes"] for m in s["memory"])
p = s["predicted"]
assert p["step_seconds"] > 0 and p["compute_seconds"] > 0, p
assert p["step_seconds"] >= p["compute_seconds"] * 0.999, p
assert all(isinstance(n, str) for n in s["decisions"]) and s["decisions"]
