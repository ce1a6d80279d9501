#!/usr/bin/env python3
"""Compares a forward run's outputs (mtrun --outputs) with want.json: the
same names and shapes, floats within RTOL of the largest |want| (and
booleans and indices equal); prints each output's dtype and "ok".

  check_forward.py OUT.safetensors WANT.json RTOL
"""
import json
import sys

import numpy as np

from safetensors_file import read_safetensors

got = read_safetensors(sys.argv[1])
want = json.load(open(sys.argv[2]))
rtol = float(sys.argv[3])
if sorted(got) != sorted(want):
    sys.exit(f"outputs {sorted(got)}, want {sorted(want)}")
for name in sorted(want):
    dtype, g = got[name]
    w = np.array(want[name]["data"]).reshape(want[name]["shape"])
    if list(g.shape) != list(w.shape):
        sys.exit(f"{name}: shape {list(g.shape)}, want {list(w.shape)}")
    if dtype in ("F32", "BF16"):
        err = np.abs(g - w).max() / max(np.abs(w).max(), 1e-30)
        if not err <= rtol:
            sys.exit(f"{name}: relative error {err:.3g} over {rtol}")
    elif not np.array_equal(g, w):
        sys.exit(f"{name}: {g.reshape(-1).tolist()} != {w.reshape(-1).tolist()}")
    print(name, dtype)
print("ok")
