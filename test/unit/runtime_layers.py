#!/usr/bin/env python3
"""The runtime's folders point down: each file of runtime/<folder>/ includes
runtime headers of its own folder, of the schema, or of the folders below it
(runtime/CMakeLists.txt), and kernel headers only where its layer may (the
plan only their shapes). Prints each include that points elsewhere; exits 1
if there is one.

  runtime_layers.py SOURCE_DIR
"""
import os
import re
import sys

BELOW = {
    "base": set(),
    "plan": {"base"},
    "io": {"base"},
    "optim": {"base"},
    "comm": {"base"},
    "cost": {"plan", "base"},
    "exec": {"plan", "cost", "optim", "comm", "base"},
    "hal/cpu": {"exec", "plan", "cost", "optim", "comm", "base"},
    "hal/cuda": {"exec", "plan", "cost", "optim", "comm", "base"},
    "train": {"exec", "io", "plan", "cost", "optim", "comm", "base"},
    # Which backends this build has: above both.
    "hal": {"hal/cpu", "hal/cuda", "exec", "plan", "cost", "optim", "comm",
            "base"},
}
# The layers below the engine see the kernels' shapes alone.
SHAPES_ONLY = {"base", "plan", "io", "cost", "comm"}
INCLUDE = re.compile(r'#include\s+"((runtime|kernels)/[^"]+)"')

root = os.path.join(sys.argv[1], "runtime")
bad = []
seen = set()
for folder in BELOW:
    path = os.path.join(root, folder)
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if not os.path.isfile(full):
            continue
        seen.add(os.path.relpath(full, root))
        for n, line in enumerate(open(full, encoding="utf-8"), 1):
            m = INCLUDE.search(line)
            if not m:
                continue
            inc = m.group(1)
            if m.group(2) == "kernels":
                ok = folder not in SHAPES_ONLY or inc == "kernels/shapes.h"
            else:
                parts = inc.split("/")
                target = "/".join(parts[1:-1])
                ok = target in ("schema", folder) or target in BELOW[folder]
            if not ok:
                bad.append(f"runtime/{folder}/{name}:{n}: includes {inc}")
# Every source of the runtime lives in one of the folders.
for dirpath, _, files in os.walk(root):
    for name in files:
        rel = os.path.relpath(os.path.join(dirpath, name), root)
        if rel.endswith((".h", ".cpp")) and not rel.startswith("schema/") \
                and rel not in seen:
            bad.append(f"runtime/{rel}: in no layer of runtime_layers.py")
for b in bad:
    print(b)
print("runtime layers: " + ("ok" if not bad else f"{len(bad)} wrong"))
sys.exit(1 if bad else 0)
