"""Checks mt-bench-adamw's JSON: per-path references and consistent fractions."""
import json
import sys

d = json.load(open(sys.argv[1]))
paths = d["paths"]
for name, p in paths.items():
    for key in ("adamw_params_per_s", "bandwidth_bytes_per_s", "triad_bytes_per_s"):
        assert p[key] > 0, (name, key, p)
    want = 28 * p["adamw_params_per_s"] / p["bandwidth_bytes_per_s"]
    assert abs(p["fraction_of_bandwidth"] - want) <= 1e-3 * want + 1e-3, (name, p)
used = paths[d["path"]]
# The machine's bandwidth is the fastest reference of any path.
assert d["bandwidth_bytes_per_s"] == max(p["bandwidth_bytes_per_s"] for p in paths.values()), d
assert d["triad_bytes_per_s"] == used["triad_bytes_per_s"], d
for ref in ("bandwidth", "triad"):
    want = 28 * used["adamw_params_per_s"] / d[ref + "_bytes_per_s"]
    assert abs(d["fraction_of_" + ref] - want) <= 1e-3 * want + 1e-3, (ref, d)
assert d["mtrun_params_per_s"] > 0, d
print("paths:", " ".join(sorted(paths)))
print("fractions consistent")
