#!/usr/bin/env python3
"""Checks that a Chrome trace is valid JSON with one named lane per stream
and complete events with non-negative times, and that an SVG (optional
second argument) parses; prints the lane names and the event count."""
import json
import sys
import xml.dom.minidom

trace = json.load(open(sys.argv[1]))
events = trace["traceEvents"]
lanes = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
ops = [e for e in events if e["ph"] == "X"]
assert ops and all(e["ts"] >= 0 and e["dur"] >= 0 and e["tid"] in lanes for e in ops)
print("lanes:", " ".join(lanes[t] for t in sorted(lanes)))
print("events:", len(ops))
if len(sys.argv) > 2:
    svg = xml.dom.minidom.parse(sys.argv[2])
    print("svg rects:", len(svg.getElementsByTagName("rect")))
