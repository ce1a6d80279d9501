"""Reads and writes safetensors files with numpy alone (the format: an
8-byte little-endian header size, the JSON header, then the data), for the
tests that need no torch: BF16 is read as the upper half of an fp32."""
import json
import struct

import numpy as np

DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64",
          np.dtype(np.float64): "F64", np.dtype(np.int32): "I32",
          np.dtype(np.uint8): "U8", np.dtype(np.bool_): "BOOL"}


def write_safetensors(path, tensors):
    """tensors: {name: numpy array, or ("BF16", float32 array)}"""
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        dtype = None
        if isinstance(a, tuple):  # ("BF16", float32 values): the upper halves
            dtype, a = a
            a = (np.asarray(a, np.float32).view(np.uint32) >> 16).astype(
                np.uint16)
        a = np.ascontiguousarray(a)
        data = a.tobytes()
        header[name] = {"dtype": dtype or DTYPES[a.dtype],
                        "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    """{name: (dtype, numpy array as float64 or int64)}"""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = (8 + n + o for o in t["data_offsets"])
        raw = data[begin:end]
        if t["dtype"] == "BF16":
            bits = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
            a = bits.view(np.float32).astype(np.float64)
        else:
            kind = {"F32": np.float32, "I64": np.int64, "U8": np.uint8,
                    "F64": np.float64}[t["dtype"]]
            a = np.frombuffer(raw, kind)
        out[name] = (t["dtype"], a.reshape(t["shape"]))
    return out
