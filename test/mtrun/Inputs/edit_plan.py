#!/usr/bin/env python3
"""Rewrites a plan file the way a hostile or broken one would be, for the
tests of what mtrun refuses (the plan's Python classes come from protoc).

  edit_plan.py PROTO PLAN OUT EDIT

EDIT:
  cycle        an op of the micro-batch phase also waits on a token that
               a later op (on another stream, waiting on it) signals
  data=NAME    the first parameter with data names NAME as its file
  version=N    the plan says it is of version N
  utf8         a byte of the first parameter's name is not UTF-8 (which
               protobuf refuses in a string field)
  weight-shape the weight of the first LINEAR op is one column narrower
               than its input (it still fits its arena)
  head-scratch the head's chunk scratch holds one row of logits fewer than
               its chunk needs
  adamw-rank=N the first ADAMW op runs on rank N alone (a plan of ranks)
  adamw-everywhere  the first ADAMW op of a plan of ranks runs on every
               rank, though its state is its owner's alone
  reduce-stream the first REDUCE_TO_OWNER runs on the optimizer stream
"""
import importlib
import os
import struct
import subprocess
import sys
import tempfile
import zlib

proto, plan_path, out_path, edit = sys.argv[1:5]
gen = tempfile.mkdtemp()
subprocess.run(["protoc", "-I", os.path.dirname(proto), "--python_out", gen,
                proto], check=True)
sys.path.insert(0, gen)
pb = importlib.import_module("plan_pb2")

data = open(plan_path, "rb").read()
plan = pb.Plan()
plan.ParseFromString(data[20:])

if edit == "cycle":
    phase = next(p for p in plan.phases if p.kind == pb.MICRO_BATCH)
    signaller = {t: i for i, op in enumerate(phase.ops) for t in op.signals}
    # The first op j that waits on an earlier op i of another stream.
    i, j = next((signaller[t], j) for j, op in enumerate(phase.ops)
                for t in op.waits
                if phase.ops[signaller[t]].stream != op.stream)
    token = plan.num_tokens
    plan.num_tokens += 1
    phase.ops[j].signals.append(token)
    phase.ops[i].waits.append(token)
    print(f"op {i} now waits on token {token}, which op {j} signals")
elif edit.startswith("data="):
    p = next(p for p in plan.parameters if p.data.file)
    p.data.file = edit[len("data="):]
elif edit.startswith("version="):
    plan.version = int(edit[len("version="):])
elif edit == "weight-shape":
    op = next(op for ph in plan.phases for op in ph.ops
              if op.kernel == pb.LINEAR)
    w = plan.buffers[op.operands[1]]
    w.shape[-1] -= 1
    print(f"weight {w.name} is now {list(w.shape)}")
elif edit == "head-scratch":
    op = next(op for ph in plan.phases for op in ph.ops
              if op.kernel == pb.HEAD_CROSS_ENTROPY)
    scratch = plan.buffers[op.results[-1]]
    scratch.shape[0] -= 1
    print(f"scratch {scratch.name} is now {list(scratch.shape)}")
elif edit == "mlp-scratch":
    op = next(op for ph in plan.phases for op in ph.ops
              if op.kernel == pb.GATED_MLP_GRAD)
    scratch = plan.buffers[op.results[-1]]
    scratch.shape[0] -= 1
    print(f"scratch {scratch.name} is now {list(scratch.shape)}")
elif edit.startswith("adamw-rank=") or edit == "adamw-everywhere":
    op = next(op for ph in plan.phases for op in ph.ops
              if op.kernel == pb.ADAMW)
    if edit == "adamw-everywhere":
        op.ClearField("rank")
    else:
        op.rank = int(edit[len("adamw-rank="):])
elif edit == "reduce-stream":
    op = next(op for ph in plan.phases for op in ph.ops
              if op.kernel == pb.REDUCE_TO_OWNER)
    op.stream = next(i for i, s in enumerate(plan.streams)
                     if s.kind == pb.HOST_OPTIMIZER)
elif edit != "utf8":
    sys.exit(f"unknown edit {edit}")

payload = plan.SerializeToString()
if edit == "utf8":
    name = plan.parameters[0].name.encode()
    at = payload.index(name)
    payload = payload[:at] + b"\xff" + payload[at + 1:]
with open(out_path, "wb") as f:
    f.write(b"MTPLAN01" + struct.pack("<QI", len(payload),
                                      zlib.crc32(payload)) + payload)
