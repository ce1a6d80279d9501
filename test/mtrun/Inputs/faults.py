#!/usr/bin/env python3
"""Fault scenarios for mtrun that need processes, signals and limits (lit's
shell has none of them). Each prints one line for FileCheck.

  faults.py SCENARIO MTRUN PLAN DATA WORKDIR [mtrun options...]

signal:   SIGTERM after a few steps: exit 143 and a checkpoint; resuming it
          gives the straight run's losses.
kill9:    kill -9 while checkpoints are written every step: the newest
          complete one resumes to the straight run's losses.
fulldisk: a save that cannot be written (file size limit) fails with exit 1
          and leaves the previous checkpoint, which resumes to the straight
          run's losses.
sigint2:  two SIGINTs during a long step: exit 130 at once, nothing saved.
"""
import json
import os
import resource
import signal
import subprocess
import sys
import time

scenario, mtrun, plan, data, work = sys.argv[1:6]
extra = sys.argv[6:]
STEPS = 40


def run(args, **kw):
    return subprocess.run([mtrun, plan, "--data", data] + extra + args,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, **kw)


def losses(path):
    return {json.loads(l)["step"]: json.loads(l)["loss"]
            for l in open(path) if l.strip()}


def wait_for(predicate, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.002)
    return False


def compare(straight, resumed, first):
    want = {s: l for s, l in straight.items() if s >= first}
    got = {s: l for s, l in resumed.items() if s >= first}
    return "identical" if want == got and want else f"DIFFERENT {want} {got}"


os.makedirs(work, exist_ok=True)
ck = os.path.join(work, "ck")
metrics = os.path.join(work, "run.jsonl")
if scenario != "sigint2":
    straight_path = os.path.join(work, "straight.jsonl")
    r = run(["--steps", str(STEPS), "--metrics", straight_path])
    assert r.returncode == 0, r.stderr
    straight = losses(straight_path)

if scenario == "sigint2":
    # Steps of seconds: a second SIGINT must not wait for the step to end.
    p = subprocess.Popen([mtrun, plan, "--data", data] + extra +
                         ["--steps", "20", "--save", ck, "--metrics", metrics],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: os.path.exists(metrics) and
             len(open(metrics).readlines()) >= 1)
    p.send_signal(signal.SIGINT)
    time.sleep(0.1)
    t = time.time()
    p.send_signal(signal.SIGINT)
    p.wait()
    print(f"sigint2: exit {p.returncode}, within half a second "
          f"{time.time() - t < 0.5}, nothing saved {not os.path.isdir(ck) or not os.listdir(ck)}")

elif scenario == "signal":
    p = subprocess.Popen([mtrun, plan, "--data", data] + extra +
                         ["--steps", str(STEPS), "--save", ck, "--metrics",
                          metrics], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    wait_for(lambda: os.path.exists(metrics) and
             len(open(metrics).readlines()) >= 3)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate()
    stopped = max(losses(metrics))
    r = run(["--steps", str(STEPS), "--resume", ck, "--metrics", metrics])
    print(f"signal: exit {p.returncode}, stopped after a step < {STEPS}: "
          f"{stopped < STEPS}, resume exit {r.returncode}, losses "
          f"{compare(straight, losses(metrics), stopped + 1)}")

elif scenario == "kill9":
    p = subprocess.Popen([mtrun, plan, "--data", data] + extra +
                         ["--steps", str(STEPS), "--save", ck, "--save-every",
                          "1", "--keep", "2"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    wait_for(lambda: os.path.isdir(os.path.join(ck, "step-00000003")))
    time.sleep(0.013)  # somewhere in a step or in a save
    p.kill()
    p.wait()
    r = run(["--steps", str(STEPS), "--resume", ck, "--metrics", metrics])
    first = min(losses(metrics)) if os.path.exists(metrics) else None
    print(f"kill9: killed {p.returncode == -signal.SIGKILL}, resume exit "
          f"{r.returncode}, losses {compare(straight, losses(metrics), first)}")

elif scenario == "fulldisk":
    r = run(["--steps", "4", "--save", ck])
    assert r.returncode == 0, r.stderr

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))

    r = run(["--steps", "8", "--resume", ck, "--save", ck],
            preexec_fn=small_files)
    message = r.stderr.strip().splitlines()[-1]
    left = sorted(os.listdir(ck))
    r2 = run(["--steps", str(STEPS), "--resume", ck, "--metrics", metrics])
    print(f"fulldisk: exit {r.returncode}, left {left}, resume exit "
          f"{r2.returncode}, losses {compare(straight, losses(metrics), 5)}")
    print(message)
else:
    sys.exit(f"unknown scenario {scenario}")
