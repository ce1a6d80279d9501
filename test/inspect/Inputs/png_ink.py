#!/usr/bin/env python3
"""Counts the pixels of a PNG (as rsvg-convert writes it: 8-bit RGB or RGBA,
not interlaced) within 12 per channel of each colour given, and prints
'<name>: <count> px of <colour>' for each. Only the standard library: the
PNG is inflated with zlib and its rows unfiltered here.
  png_ink.py FILE.png NAME=#rrggbb [NAME=#rrggbb ...]"""
import struct
import sys
import zlib


def pixels(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path + ": not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and not interlace, "unsupported PNG"
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    channels = 4 if colour == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        rows.append(line)
        prev = line
    for line in rows:
        for x in range(width):
            yield tuple(line[x * channels:x * channels + 3])


px = list(pixels(sys.argv[1]))
for spec in sys.argv[2:]:
    name, colour = spec.split("=")
    want = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
    n = sum(1 for p in px if all(abs(p[k] - want[k]) <= 12 for k in range(3)))
    print(f"{name}: {n} px of {colour}")
