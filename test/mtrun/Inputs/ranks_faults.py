#!/usr/bin/env python3
"""Kills one rank of a data-parallel run and reports how the run ended.

  ranks_faults.py MPIRUN MTRUN PLAN TOKENS SAVE ONE_PLAN

Runs `MPIRUN -np 2 MTRUN PLAN` with checkpoints every 2 steps, every rank
held forever at the first op of step 4 (the MT_TEST_HOLD test hook), so
that the kill lands at the same point however slow the machine. Once both
ranks say they are held, rank 1 gets SIGKILL. Prints whether the launcher
ended within the guard's time (a hang fails the test), its exit code,
whether its message names rank 1, which checkpoints are left, and whether
the last resumes in one process (ONE_PLAN, the same step on one rank).
"""
import os
import signal
import subprocess
import sys

mpirun, mtrun, plan, tokens, save, one_plan = sys.argv[1:7]
env = dict(os.environ, MT_TEST_HOLD="4:0:forever")
run = subprocess.Popen(
    mpirun.split() + ["-np", "2", "-x", "MT_TEST_HOLD", mtrun, plan, "--data",
                      tokens, "--steps", "10", "--save", save,
                      "--save-every", "2", "--threads", "1"],
    stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
held = 0
lines = []
for line in run.stderr:
    lines.append(line)
    held += "waits forever" in line
    if held == 2:
        break


def rank_of(pid):
    try:
        environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return None
    if plan.encode() not in cmdline or mtrun.encode() not in cmdline:
        return None
    for entry in environ:
        if entry.startswith(b"OMPI_COMM_WORLD_RANK="):
            return int(entry.split(b"=")[1])
    return None


victims = [int(p) for p in os.listdir("/proc")
           if p.isdigit() and rank_of(int(p)) == 1]
for pid in victims:
    os.kill(pid, signal.SIGKILL)
try:
    # A guard against a hang, not a measure of time: the launcher ends the
    # other rank as soon as it sees one die.
    _, rest = run.communicate(timeout=120)
    lines.append(rest)
    code = run.returncode
except subprocess.TimeoutExpired:
    run.kill()
    print("HANG: the run did not end after rank 1 was killed")
    sys.exit(1)
text = "".join(lines)
left = sorted(d for d in os.listdir(save) if d.startswith("step-"))
resume = subprocess.run([mtrun, one_plan, "--data", tokens, "--steps", "4",
                         "--resume", save, "--threads", "1"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(f"killed rank 1: {len(victims) == 1}, exit {code}, "
      f"names rank 1: {'process rank 1' in text}, left {left}, "
      f"resume exit {resume.returncode}")
