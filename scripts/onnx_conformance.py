#!/usr/bin/env python3
"""ONNX's own node test cases (onnx.backend.test.case.node) through mt: the
operators in scope are the standard domain's at opsets up to 23 (onnx.defs)
less docs/onnx-operators.md's table of exclusions; every case of an operator
in scope is compiled as `mtc --forward --fuse none` compiles it into a
forward-only plan and run on the CPU backend as `mtrun --inputs` runs it, by
test/unit/conformance_case.cpp, and its outputs are compared with the suite's
at its tolerances. A case counts as passed, failed, or refused (mtc said
why).

  python onnx_conformance.py --runner BUILD/bin/mt_conformance_case \\
      [--json FILE] [--report FILE.md] [--jobs N] [--filter SUBSTRING]

Integer inputs become initializers (constants), as an export's shape
operands are: mt plans static shapes. Run in the test venv (onnx);
scripts/onnx-conformance.sh finds both.
"""
import argparse
import base64
import collections
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
import onnx.defs
import onnx.version_converter
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN_OPSET, MAX_OPSET = 14, 23  # what mt's importer reads


def exclusions():
    table = open(os.path.join(ROOT, "docs", "onnx-operators.md")).read()
    return {m.group(1): m.group(2).strip()
            for m in re.finditer(r"^\| ([A-Za-z0-9]+) \| (.+) \|$", table, re.M)
            if m.group(1) != "operator"}


def standard_ops():
    return sorted({s.name for s in onnx.defs.get_all_schemas_with_history()
                   if s.domain == "" and s.since_version <= MAX_OPSET})


def op_of(case, ops):
    """The operator a case tests: its node's when it has one node, else
    (a function's expansion) the longest operator name (lower case, no
    underscores) that begins the case's name."""
    nodes = case.model.graph.node
    if len(nodes) == 1 and nodes[0].domain in ("", "ai.onnx"):
        return nodes[0].op_type
    key = case.name[len("test_"):].replace("_", "")
    best = None
    for op in ops:
        if key.startswith(op.lower()) and (best is None or len(op) > len(best)):
            best = op
    return best


def tensor(value):
    a = np.asarray(value)
    if a.dtype.name == "bfloat16":  # ml_dtypes': its values are float32's
        a = a.astype(np.float32)
    if a.dtype == np.bool_:
        kind, data = "bool", a.astype(np.int64).reshape(-1).tolist()
    elif np.issubdtype(a.dtype, np.integer):
        kind, data = "int", a.astype(np.int64).reshape(-1).tolist()
    elif np.issubdtype(a.dtype, np.floating):
        # JSON has no NaN or infinity: null and the strings "inf", "-inf".
        kind = "float"
        data = [None if np.isnan(v) else
                ("inf" if v > 0 else "-inf") if np.isinf(v) else float(v)
                for v in a.astype(np.float64).reshape(-1)]
    else:
        return None
    return {"type": kind, "shape": list(a.shape), "data": data}


def within_opsets(model):
    """The model at an opset the importer reads: as it is when it is one,
    else at 23: its opset import rewritten where every node's operator has
    the same form at 23 as at its own opset, converted by ONNX's version
    converter otherwise. None when neither can."""
    default = [o for o in model.opset_import if o.domain in ("", "ai.onnx")]
    opset = default[0].version if default else MAX_OPSET
    if MIN_OPSET <= opset <= MAX_OPSET:
        return model
    try:
        same = all(onnx.defs.get_schema(n.op_type, opset).since_version ==
                   onnx.defs.get_schema(n.op_type, MAX_OPSET).since_version
                   for n in model.graph.node)
    except onnx.defs.SchemaError:
        same = False
    if same:
        default[0].version = MAX_OPSET
    else:
        try:
            model = onnx.version_converter.convert_version(model, MAX_OPSET)
        except Exception:
            return None
    model.ir_version = 11  # opset 23's
    return model


def case_json(case, inputs, outputs):
    """The case in the runner's format, or the reason it cannot be one."""
    model = within_opsets(onnx.ModelProto.FromString(
        case.model.SerializeToString()))
    if model is None:
        opset = [o.version for o in case.model.opset_import][0]
        return None, (f"opset {opset}: its form differs at opset {MAX_OPSET} "
                      "and ONNX's version converter cannot convert it")
    graph = model.graph
    feeds, fed = [], []
    names = [i.name for i in graph.input]
    for name, value in zip(names, inputs):
        if isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        if value is None or isinstance(value, (list, dict)):
            return None, "an input that is not a tensor (a sequence or an optional)"
        a = np.asarray(value)
        if a.dtype == object:
            return None, "an input of strings"
        if np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_:
            # A constant, as an export's shape operands are.
            graph.initializer.append(numpy_helper.from_array(a, name))
            kept = [i for i in graph.input if i.name != name]
            del graph.input[:]
            graph.input.extend(kept)
            continue
        t = tensor(a)
        if t is None:
            return None, f"input of dtype {a.dtype}"
        feeds.append(t)
        fed.append(name)
        # mt plans static shapes: a dim the case leaves open is the one its
        # input has (as mtc's --batch and --seq would set it).
        for i in graph.input:
            if i.name == name:
                for d, n in zip(i.type.tensor_type.shape.dim, a.shape):
                    if not d.HasField("dim_value"):
                        d.dim_value = n
    outs = []
    for value in outputs:
        if isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        t = tensor(value) if not isinstance(value, (list, dict)) else None
        if t is None:
            return None, "an output that is not a tensor"
        outs.append(t)
    return {"name": case.name,
            "model": base64.b64encode(model.SerializeToString()).decode(),
            "inputs": feeds, "input_names": fed, "outputs": outs,
            "rtol": float(case.rtol), "atol": float(case.atol)}, None


def run_case(runner, workdir, index, payload):
    path = os.path.join(workdir, f"case{index}.json")
    with open(path, "w") as f:
        json.dump(payload, f)
    env = dict(os.environ, MT_CONFORMANCE_CASE=path)
    try:
        p = subprocess.run([runner], env=env, capture_output=True, text=True,
                           timeout=120)
    except subprocess.TimeoutExpired:
        return "failed", "timed out after 120 s"
    finally:
        os.remove(path)
    out = p.stdout + p.stderr
    refused = re.search(r"^REFUSED: (.*)$", out, re.M)
    if p.returncode == 0 and refused:
        # The node and the reason, without the case's file or the list of
        # supported operators.
        why = refused.group(1)
        said = re.search(r"^mtc: error: (.*)$", out, re.M)
        if why == "mtc refused it" and said:  # said on stderr, not diagnosed
            why = said.group(1)
        why = why.split("; supported:")[0]
        return "refused", why.replace(path + ".onnx: ", "").strip()
    if p.returncode == 0:
        return "passed", ""
    if os.environ.get("MT_CONFORMANCE_VERBOSE"):
        sys.stderr.write(f"== {payload['name']}\n{out}\n")
    if p.returncode < 0:
        return "failed", f"crashed (signal {-p.returncode})"
    # The first failure gtest reports: the lines after its "Failure".
    lines = out.splitlines()
    start = next((i for i, l in enumerate(lines) if "Failure" in l), None)
    if start is None:
        return "failed", f"exit status {p.returncode}"
    why = []
    for l in lines[start + 1:]:
        if not l.strip() or l.startswith("[") or "Failure" in l:
            break
        why.append(l.strip())
    return "failed", " ".join(why)[:300]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runner", required=True)
    ap.add_argument("--json", help="write {operator: {passed, failed, refused}}")
    ap.add_argument("--report", help="write the per-operator report (markdown)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--filter", default="", help="only cases whose name has it")
    args = ap.parse_args()

    excluded = exclusions()
    ops = standard_ops()
    unknown = sorted(set(excluded) - set(ops))
    if unknown:
        sys.exit(f"docs/onnx-operators.md excludes what the standard lacks: {unknown}")
    scope = [op for op in ops if op not in excluded]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases
        cases = collect_testcases("")
    jobs = []
    counts = {op: collections.Counter() for op in scope}
    reasons = collections.defaultdict(list)
    for case in cases:
        op = op_of(case, ops)
        if op not in counts or args.filter not in case.name:
            continue
        for k, (inputs, outputs) in enumerate(case.data_sets):
            payload, why = case_json(case, inputs, outputs)
            name = case.name + (f"[{k}]" if len(case.data_sets) > 1 else "")
            if payload is None:
                counts[op]["refused"] += 1
                reasons[op].append((name, "refused", why))
            else:
                jobs.append((op, name, payload))
    with tempfile.TemporaryDirectory() as workdir, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(
            lambda j: run_case(args.runner, workdir, j[0], j[1][2]),
            enumerate(jobs)))
    for (op, name, _), (status, why) in zip(jobs, results):
        counts[op][status] += 1
        if status != "passed":
            reasons[op].append((name, status, why))

    table = {op: {k: counts[op][k] for k in ("passed", "failed", "refused")}
             for op in scope}
    totals = collections.Counter()
    for c in table.values():
        totals.update(c)
    ops_all_pass = sum(1 for c in table.values()
                       if c["passed"] and not c["failed"] and not c["refused"])
    ops_no_case = sorted(op for op, c in table.items() if not sum(c.values()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1, sort_keys=True)
            f.write("\n")
    if args.report:
        write_report(args.report, table, reasons, totals, ops_all_pass,
                     ops_no_case, len(scope))
    print(f"{len(scope)} operators in scope, {sum(totals.values())} cases: "
          f"{totals['passed']} passed, {totals['failed']} failed, "
          f"{totals['refused']} refused; {ops_all_pass} operators pass every "
          f"case, {len(ops_no_case)} have no case in the suite")


def write_report(path, table, reasons, totals, ops_all_pass, ops_no_case,
                 scope):
    lines = [
        "# ONNX conformance: the node test cases of every operator in scope",
        "",
        f"Written by `scripts/onnx-conformance.sh --report` (onnx {onnx.__version__}): each "
        "case of ONNX's node test suite for an operator in scope "
        "([onnx-operators.md](onnx-operators.md)) compiled as `mtc --forward "
        "--fuse none` compiles it and run on the CPU backend as `mtrun "
        "--inputs` runs the plan, at the suite's tolerances.",
        "",
        f"**{totals['passed']} cases passed, {totals['failed']} failed, "
        f"{totals['refused']} refused**; {ops_all_pass} of {scope} operators "
        f"pass every case; {len(ops_no_case)} have no case in the suite"
        + (f" ({', '.join(ops_no_case)})" if ops_no_case else "") + ".",
        "",
        "| operator | passed | failed | refused | the first failure (else refusal) |",
        "|---|---:|---:|---:|---|"]
    for op, c in sorted(table.items()):
        ordered = sorted(reasons[op], key=lambda r: r[1] != "failed")
        first = next((f"{name}: {why}" for name, status, why in ordered), "")
        first = first.replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(f"| {op} | {c['passed']} | {c['failed']} | "
                     f"{c['refused']} | {first} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
