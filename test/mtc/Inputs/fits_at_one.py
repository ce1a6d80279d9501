"""Plans MODEL at K micro-batches from budgets (the host memory ample),
reads the host memory its plan needs (pinned included), then plans the same
tokens as one micro-batch with exactly that host budget: one micro-batch
needs no more of anything, so it must fit. Prints both needs.

  fits_at_one.py BIN MODEL K BATCH SEQ [mtc flags...]   (BIN: mtc's folder)
"""
import json
import os
import subprocess
import sys

bin_dir, model, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
batch, seq, flags = sys.argv[4], sys.argv[5], sys.argv[6:]


def plan(accum, out, *extra):
    subprocess.run([os.path.join(bin_dir, "mtc"), model, "--batch", batch, "--seq", seq,
                    "--grad-accum", str(accum), "-o", out, *flags, *extra],
                   check=True, stderr=subprocess.DEVNULL)
    peaks = json.loads(subprocess.run([os.path.join(bin_dir, "mt-inspect"),
                                       out, "--json"],
                                      check=True, capture_output=True,
                                      text=True).stdout)["arena_peak_bytes"]
    return peaks.get("host", 0) + peaks.get("host_pinned", 0)


need = plan(k, "k.mtp")
one = plan(1, "one.mtp", "--host-mem", str(need))
print(f"{k} micro-batches need {need} host bytes, 1 needs {one}:",
      "ok" if one <= need else "MORE")
