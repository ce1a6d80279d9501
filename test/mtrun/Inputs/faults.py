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
sigint2:  two SIGINTs during a step that never ends: exit 130 at once,
          nothing saved.
hang:     SIGTERM during a step that never ends: mtrun stops after
          --stop-timeout (1 s), naming what each stream was doing.

Nothing here depends on how long a step takes: mtrun's test hook
MT_TEST_HOLD=STEP:OP[:forever] holds an op of a step until the run is asked
to stop (or forever), and the script waits for mtrun's own word (a metrics
line, a checkpoint, the hold's note on stderr) before it signals.
"""
import atexit
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


started = []


def start(args, hold):
    """mtrun in the background with MT_TEST_HOLD=hold; stderr to a file.
    Killed when this script ends, however it ends: a held mtrun would
    otherwise wait forever."""
    err = open(os.path.join(work, "stderr.txt"), "w")
    env = dict(os.environ, MT_TEST_HOLD=hold)
    p = subprocess.Popen([mtrun, plan, "--data", data] + extra + args,
                         stdout=subprocess.DEVNULL, stderr=err, env=env)
    started.append(p)
    return p


def kill_started():
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()


atexit.register(kill_started)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))


def stderr_text():
    return open(os.path.join(work, "stderr.txt")).read()


def losses(path):
    return {json.loads(l)["step"]: json.loads(l)["loss"]
            for l in open(path) if l.strip()}


def wait_for(predicate, process):
    """Polls until `predicate` holds; however long that takes, but not past
    the process's end (then the scenario has failed)."""
    while not predicate():
        if process.poll() is not None:
            sys.exit(f"{scenario}: mtrun ended ({process.returncode}) before "
                     f"the scenario could act:\n{stderr_text()}")
        time.sleep(0.002)


def held(process):
    wait_for(lambda: "MT_TEST_HOLD" in stderr_text(), process)


def compare(straight, resumed, first):
    want = {s: l for s, l in straight.items() if s >= first}
    got = {s: l for s, l in resumed.items() if s >= first}
    return "identical" if want == got and want else f"DIFFERENT {want} {got}"


os.makedirs(work, exist_ok=True)
ck = os.path.join(work, "ck")
metrics = os.path.join(work, "run.jsonl")
if scenario not in ("sigint2", "hang"):
    straight_path = os.path.join(work, "straight.jsonl")
    r = run(["--steps", str(STEPS), "--metrics", straight_path])
    assert r.returncode == 0, r.stderr
    straight = losses(straight_path)

if scenario == "sigint2":
    # The first step never ends: only the second SIGINT can stop the run.
    p = start(["--steps", "20", "--save", ck, "--metrics", metrics],
              "1:0:forever")
    held(p)
    p.send_signal(signal.SIGINT)
    # Signals of one kind do not queue: the second is sent once mtrun has
    # taken the first.
    wait_for(lambda: "stopping after step" in stderr_text(), p)
    p.send_signal(signal.SIGINT)
    p.wait()
    print(f"sigint2: exit {p.returncode}, nothing saved "
          f"{not os.path.isdir(ck) or not os.listdir(ck)}")
    print(stderr_text().strip().splitlines()[-1])

elif scenario == "hang":
    # The first step never ends and one signal arrives: the stop timeout
    # ends the run, naming the streams' ops.
    p = start(["--steps", "20", "--save", ck, "--stop-timeout", "1"],
              "1:0:forever")
    held(p)
    p.send_signal(signal.SIGTERM)
    p.wait()
    print(f"hang: exit {p.returncode}, nothing saved "
          f"{not os.path.isdir(ck) or not os.listdir(ck)}")
    print(stderr_text().strip())

elif scenario == "signal":
    # Step 4 waits for the signal, so that the run cannot end before it.
    p = start(["--steps", str(STEPS), "--save", ck, "--metrics", metrics],
              "4:0")
    wait_for(lambda: os.path.exists(metrics) and
             len(open(metrics).readlines()) >= 3, p)
    p.send_signal(signal.SIGTERM)
    p.wait()
    stopped = max(losses(metrics))
    r = run(["--steps", str(STEPS), "--resume", ck, "--metrics", metrics])
    print(f"signal: exit {p.returncode}, stopped after a step < {STEPS}: "
          f"{stopped < STEPS}, resume exit {r.returncode}, losses "
          f"{compare(straight, losses(metrics), stopped + 1)}")

elif scenario == "kill9":
    # Step 6 never ends, so that the kill lands in a step or a save
    # (whichever: the newest complete checkpoint must resume exactly).
    p = start(["--steps", str(STEPS), "--save", ck, "--save-every", "1",
               "--keep", "2"], "6:0:forever")
    wait_for(lambda: os.path.isdir(os.path.join(ck, "step-00000003")), p)
    time.sleep(0.013)  # a moment later: in a step or in a save
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
