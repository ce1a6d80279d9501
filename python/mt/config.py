"""mt.init: the machine's budgets and the state formats, for mtc's planner."""
import os
import sys
import warnings

_COMPRESSION = {False: "fp32", True: "8bit", "fp32": "fp32", "bf16": "bf16",
                "8bit": "8bit", "4bit": "4bit"}


def _offload_dir(path):
    """The disk tier's directory, absolute, checked now rather than when
    mtrun first writes there: created (and said so) when only its last
    component is missing."""
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    if not os.path.exists(path):
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            raise ValueError(f"mt.init: offload_dir {path!r} does not exist, "
                             f"nor does its parent {parent!r}; create it, or "
                             "name a directory on the disk to offload to")
        try:
            os.mkdir(path)
        except OSError as e:
            raise ValueError(f"mt.init: cannot create offload_dir {path!r}: "
                             f"{e.strerror}") from None
        print(f"mt: created offload_dir {path}", file=sys.stderr)
    if not os.path.isdir(path):
        raise ValueError(f"mt.init: offload_dir {path!r} is not a directory")
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise ValueError(f"mt.init: offload_dir {path!r} is not a directory "
                         "mt can read and write")
    return path


class Config:
    """What mt.init was given: each maps onto an mtc or mtrun flag."""

    def __init__(self, offload_dir=None, max_vram_gb=None, max_host_gb=None,
                 optimizer_compression=False, target=None, device="auto",
                 threads=None):
        for name, value in (("max_vram_gb", max_vram_gb),
                            ("max_host_gb", max_host_gb)):
            if value is not None and not (isinstance(value, (int, float))
                                          and value > 0):
                raise ValueError(f"mt.init: {name} must be a positive number "
                                 f"of GiB, got {value!r}")
        if optimizer_compression not in _COMPRESSION:
            raise ValueError("mt.init: optimizer_compression must be False "
                             "(exact fp32 moments), True (8-bit, lossy) or "
                             "one of 'bf16', '8bit', '4bit' (lossy), got "
                             f"{optimizer_compression!r}")
        if device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"mt.init: device must be auto, cpu or cuda, got "
                             f"{device!r}")
        self.offload_dir = _offload_dir(offload_dir) if offload_dir else None
        self.max_vram_gb = max_vram_gb
        self.max_host_gb = max_host_gb
        self.moments = _COMPRESSION[optimizer_compression]
        self.target = target
        self.device = device
        self.threads = threads
        if self.moments != "fp32":
            warnings.warn(f"mt: LOSSY: the AdamW moments are stored in "
                          f"{self.moments} (optimizer_compression)")

    def mtc_flags(self):
        flags = []
        if self.target:
            flags += ["--target", str(self.target)]
        if self.max_vram_gb is not None:
            flags += ["--gpu-mem", f"{self.max_vram_gb}GiB"]
        if self.max_host_gb is not None:
            flags += ["--host-mem", f"{self.max_host_gb}GiB"]
        if self.offload_dir:
            flags += ["--disk", str(self.offload_dir)]
        flags += ["--optimizer-states", self.moments]
        return flags

    def mtrun_flags(self):
        flags = ["--device", self.device]
        if self.offload_dir:
            flags += ["--disk", str(self.offload_dir)]
        if self.threads:
            flags += ["--threads", str(self.threads)]
        return flags


_current = Config()


def init(offload_dir=None, max_vram_gb=None, max_host_gb=None,
         optimizer_compression=False, target=None, device="auto",
         threads=None):
    """Sets what every later mt.Trainer plans for.

    offload_dir: a directory for the disk tier (mtc --disk): the planner may
        keep the AdamW moments there when host memory is short. Checked
        here; created when only its last component is missing.
    max_vram_gb, max_host_gb: the GPU's and the host's memory budgets in GiB
        (mtc --gpu-mem, --host-mem); by default the target's.
    optimizer_compression: False keeps the moments in fp32 (exact); True
        stores them in 8 bits, or name 'bf16', '8bit' or '4bit': lossy, and
        said so.
    target: a built-in target (h200, h100, a100, rtx4090, cpu) or a file of
        mtrun --calibrate (mtc --target).
    device: mtrun --device (auto: the GPU when there is one).
    """
    global _current
    _current = Config(offload_dir, max_vram_gb, max_host_gb,
                      optimizer_compression, target, device, threads)
    return _current


def current():
    return _current
