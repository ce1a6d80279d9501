"""mt.Trainer: Hugging Face's Trainer surface over mtc and mtrun."""
import collections
import dataclasses
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading

from . import config as _config

TrainOutput = collections.namedtuple("TrainOutput",
                                     ["global_step", "training_loss", "metrics"])


class TrainingError(RuntimeError):
    """A tool refused the job or failed; the message is the tool's."""


# TrainingArguments fields mt honours (the rest must keep their defaults),
# and the ones that only change how progress is shown or logged.
_HONOURED = {
    "output_dir", "per_device_train_batch_size", "gradient_accumulation_steps",
    "learning_rate", "max_steps", "num_train_epochs", "warmup_steps",
    "warmup_ratio", "lr_scheduler_type", "weight_decay", "max_grad_norm",
    "adam_beta1", "adam_beta2", "adam_epsilon", "save_steps",
    "save_strategy", "save_total_limit", "optim",
}
_NO_EFFECT = {
    "overwrite_output_dir", "logging_dir", "logging_strategy", "logging_steps",
    "logging_first_step", "logging_nan_inf_filter", "report_to", "run_name",
    "disable_tqdm", "log_level", "log_level_replica", "log_on_each_node",
    "do_train", "dataloader_num_workers", "dataloader_pin_memory",
    "dataloader_persistent_workers", "dataloader_prefetch_factor",
    "remove_unused_columns", "label_names", "push_to_hub", "hub_model_id",
    "hub_strategy", "hub_token", "hub_private_repo", "hub_always_push",
    "save_safetensors", "save_on_each_node", "save_only_model",
    # Seeds shuffling and dropout, neither of which mt does.
    "seed", "data_seed",
    "project", "trackio_space_id", "hub_revision",
}
_DEFAULTS = {
    "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
    "learning_rate": 5e-5, "max_steps": -1, "num_train_epochs": 3.0,
    "warmup_steps": 0, "warmup_ratio": 0.0, "lr_scheduler_type": "linear",
    "weight_decay": 0.0, "max_grad_norm": 1.0, "adam_beta1": 0.9,
    "adam_beta2": 0.999, "adam_epsilon": 1e-8, "save_steps": 500,
    "save_strategy": "steps", "save_total_limit": None, "seed": 42,
    "optim": "adamw_torch",
}
# Hugging Face's scheduler names -> mtrun --lr-schedule (with
# --lr-schedule-hf); "constant" has no warmup there.
_SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant",
              "constant_with_warmup": "constant"}
_ADAMW = {"adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw"}


def _plain(value):
    """An enum field's value (SchedulerType.LINEAR -> 'linear')."""
    return getattr(value, "value", value)


def _tool(name):
    where = os.environ.get("MT_BIN")
    candidates = [os.path.join(where, name)] if where else []
    repo = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    candidates.append(os.path.join(repo, "build", "bin", name))
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    found = shutil.which(name)
    if found:
        return found
    raise TrainingError(f"mt: cannot find {name}: build the project "
                        "(scripts/bootstrap.sh) or set MT_BIN to the folder "
                        "of mtc and mtrun")


class Trainer:
    """Trains `model` on `train_dataset` as `args` say, with mtc and mtrun.

    model: a torch.nn.Module in fp32: a Hugging Face causal LM (its forward
        takes input_ids and labels), or a plain module whose
        forward(input_ids, targets) returns (loss, logits), the loss a
        cross-entropy that ignores -100, over each position's next token.
    train_dataset: examples with "input_ids" and optionally "labels"
        (aligned, -100 where not trained on) or "attention_mask": a list of
        dicts or a Hugging Face datasets.Dataset. They are trained on in
        their order (shuffle them first to shuffle), one per row (padded).
    args: Hugging Face's TrainingArguments, or any object with the same
        field names (missing ones take TrainingArguments' defaults). A field
        mt cannot honour is refused by name when it is not its default.
    """

    def __init__(self, model=None, train_dataset=None, args=None,
                 config=None):
        if model is None or train_dataset is None or args is None:
            raise TypeError("mt.Trainer needs model, train_dataset and args")
        self.model = model
        self.train_dataset = train_dataset
        self.args = args
        self.config = config or _config.current()
        self.hyper = self._read_args(args)
        self.output_dir = self.hyper["output_dir"]

    # --- the arguments ----------------------------------------------------

    def _read_args(self, args):
        got = {}
        for name, default in _DEFAULTS.items():
            got[name] = _plain(getattr(args, name, default))
        got["output_dir"] = getattr(args, "output_dir", None)
        if not got["output_dir"]:
            raise ValueError("mt.Trainer: args.output_dir is required (where "
                             "the checkpoints go)")
        # Every other field of TrainingArguments must be its default.
        if dataclasses.is_dataclass(args):
            fresh = type(args)(output_dir=got["output_dir"])
            for f in dataclasses.fields(args):
                if f.name.startswith("_") or f.name in _HONOURED or \
                        f.name in _NO_EFFECT:
                    continue
                if _plain(getattr(args, f.name)) != _plain(getattr(fresh, f.name)):
                    raise ValueError(
                        f"mt.Trainer: args.{f.name} = "
                        f"{_plain(getattr(args, f.name))!r} is not honoured by "
                        f"mt (its default is "
                        f"{_plain(getattr(fresh, f.name))!r}); leave it unset")
        if got["lr_scheduler_type"] not in _SCHEDULES:
            raise ValueError(f"mt.Trainer: args.lr_scheduler_type = "
                             f"{got['lr_scheduler_type']!r} is not honoured "
                             f"(mt has {', '.join(sorted(_SCHEDULES))})")
        if got["optim"] not in _ADAMW:
            raise ValueError(f"mt.Trainer: args.optim = {got['optim']!r} is "
                             "not honoured: mt trains with AdamW (torch's)")
        if got["save_strategy"] not in ("steps", "no"):
            raise ValueError(f"mt.Trainer: args.save_strategy = "
                             f"{got['save_strategy']!r} is not honoured (mt "
                             "saves every save_steps steps, or at the end "
                             "only with 'no')")
        for name in ("per_device_train_batch_size",
                     "gradient_accumulation_steps"):
            if not isinstance(got[name], int) or got[name] < 1:
                raise ValueError(f"mt.Trainer: args.{name} must be a whole "
                                 f"number >= 1, got {got[name]!r}")
        return got

    # --- the job ----------------------------------------------------------

    def train(self, resume_from_checkpoint=None):
        """Exports, compiles, trains and loads the weights back; returns a
        TrainOutput. Ctrl-C stops after the current step with a checkpoint:
        train(resume_from_checkpoint=True) continues from the newest."""
        import torch

        h = self.hyper
        out = os.path.abspath(self.output_dir)
        work = os.path.join(out, "mt")
        os.makedirs(work, exist_ok=True)
        examples = self._examples()
        batch = h["per_device_train_batch_size"]
        micro = h["gradient_accumulation_steps"]
        seq = max(len(ids) for ids, _ in examples)
        limit = getattr(getattr(self.model, "config", None),
                        "max_position_embeddings", None)
        if limit:
            seq = min(seq, int(limit))
        if h["max_steps"] and h["max_steps"] > 0:
            steps = int(h["max_steps"])
        else:
            per_epoch = max(1, math.ceil(len(examples) / batch) // micro)
            steps = max(1, math.ceil(per_epoch * float(h["num_train_epochs"])))
        # Hugging Face 5: warmup_steps below 1 is a ratio of the steps (as
        # warmup_ratio was before).
        warmup = float(h["warmup_steps"] or 0)
        if 0 < warmup < 1:
            warmup = math.ceil(steps * warmup)
        elif not warmup and h["warmup_ratio"]:
            warmup = math.ceil(steps * float(h["warmup_ratio"]))
        if h["lr_scheduler_type"] == "constant":
            warmup = 0  # Hugging Face's constant schedule has none
        data = os.path.join(work, "train.jsonl")
        with open(data, "w") as f:
            for ids, labels in examples:
                f.write(json.dumps({"input_ids": ids, "labels": labels}) + "\n")
        onnx, weights = self._export(work, batch, seq)
        plan = os.path.join(work, "plan.mtp")
        clip = float(h["max_grad_norm"] or 0)
        mtc = [_tool("mtc"), onnx, "--weights", weights, "--grad-accum",
               str(micro), "-o", plan] + self.config.mtc_flags()
        if clip > 0:
            mtc.append("--clipping")
        self._run(mtc, "mtc")
        metrics = os.path.join(work, "metrics.jsonl")
        mtrun = [_tool("mtrun"), plan, "--data", data, "--pad",
                 "--steps", str(steps), "--lr", repr(float(h["learning_rate"])),
                 "--warmup", str(int(warmup)),
                 "--lr-schedule", _SCHEDULES[h["lr_scheduler_type"]],
                 "--lr-schedule-hf",
                 "--beta1", repr(float(h["adam_beta1"])),
                 "--beta2", repr(float(h["adam_beta2"])),
                 "--eps", repr(float(h["adam_epsilon"])),
                 "--weight-decay", repr(float(h["weight_decay"])),
                 "--grad-clip", repr(clip), "--metrics", "-",
                 "--save", out, "--keep", str(h["save_total_limit"] or 0)]
        if h["save_strategy"] == "steps" and h["save_steps"]:
            mtrun += ["--save-every", str(int(h["save_steps"]))]
        if resume_from_checkpoint:
            where = out if resume_from_checkpoint is True \
                else str(resume_from_checkpoint)
            mtrun += ["--resume", where]
        mtrun += self.config.mtrun_flags()
        with open(metrics, "a" if resume_from_checkpoint else "w") as log:
            self._train(mtrun, steps, log)
        step = self._load_back(out, torch)
        losses = [json.loads(line) for line in open(metrics)]
        mean = sum(m["loss"] for m in losses) / len(losses) if losses else 0.0
        return TrainOutput(step, mean, {"train_loss": mean,
                                        "steps": len(losses),
                                        "checkpoint": step})

    def _examples(self):
        """The dataset as (input_ids, labels) lists, padding dropped."""
        out = []
        for i, e in enumerate(self.train_dataset):
            if "input_ids" not in e:
                raise ValueError(f"mt.Trainer: example {i} has no input_ids")
            ids = [int(x) for x in e["input_ids"]]
            labels = [int(x) for x in e.get("labels", ids)]
            mask = e.get("attention_mask")
            if len(labels) != len(ids):
                raise ValueError(f"mt.Trainer: example {i}: {len(labels)} "
                                 f"labels for {len(ids)} input_ids")
            if mask is not None:
                keep = [j for j, m in enumerate(mask) if m]
                ids = [ids[j] for j in keep]
                labels = [labels[j] for j in keep]
            if not ids:
                raise ValueError(f"mt.Trainer: example {i} has no tokens")
            out.append((ids, labels))
        if not out:
            raise ValueError("mt.Trainer: train_dataset is empty")
        return out

    def _is_hugging_face(self):
        try:
            import transformers
        except ImportError:
            return False
        return isinstance(self.model, transformers.PreTrainedModel)

    def _export(self, work, batch, seq):
        """The model as ONNX for [batch, seq] ids, and its weights under
        their state_dict names (what mtc --weights maps the graph's to)."""
        import torch
        from safetensors.torch import save_file

        for name, p in self.model.named_parameters():
            if p.dtype != torch.float32:
                raise TrainingError(f"mt: parameter {name} is {p.dtype}: mt "
                                    "trains fp32 weights (load the model "
                                    "with torch_dtype=torch.float32)")
        for name, m in self.model.named_modules():
            if isinstance(m, torch.nn.Dropout) and m.p > 0:
                raise TrainingError(f"mt: {name} is dropout with p={m.p}: mt "
                                    "trains without dropout; set it to 0")
        hf = self._is_hugging_face()
        onnx = os.path.join(work, "model.onnx")
        weights = os.path.join(work, "weights.safetensors")
        # The parameters (a tied one once): buffers are the graph's.
        state = {k: v.detach().clone().contiguous()
                 for k, v in self.model.named_parameters()}
        save_file(state, weights)
        module = self.model
        if hf:
            from .export import WithLoss, write_checkpoint_names
            module = WithLoss(self.model)
            write_checkpoint_names(self.model, work)
            # Beside the weights, so that mtc puts them in every checkpoint
            # folder (from_pretrained reads them there).
            self.model.config.save_pretrained(work)
            if getattr(self.model, "generation_config", None) is not None:
                self.model.generation_config.save_pretrained(work)
        ids = torch.randint(0, 2, (batch, seq))
        module.eval()
        dynamo = int(torch.__version__.split(".")[0]) >= 2
        second = "labels" if hf else "targets"
        if dynamo:
            program = torch.onnx.export(module, (ids, ids.clone()),
                                        dynamo=True,
                                        input_names=["input_ids", second],
                                        output_names=["loss", "logits"])
            program.save(onnx, external_data=True)
        else:  # Debian's torch 1.13: the TorchScript exporter, as examples/
            module.train()
            torch.onnx.export(module, (ids, ids.clone()), onnx,
                              opset_version=17,
                              training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False,
                              input_names=["input_ids", second],
                              output_names=["loss", "logits"])
        self.model.train()
        return onnx, weights

    def _run(self, command, name):
        done = subprocess.run(command, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise TrainingError(done.stderr.strip() or
                                f"{name} exited with {done.returncode}")
        for line in done.stderr.splitlines():
            if "LOSSY" in line or "warning" in line:
                print(line, file=sys.stderr)

    def _train(self, command, steps, log):
        """mtrun with a progress bar from its metrics lines (on its stdout,
        copied to `log`) and its own lines passed on; Ctrl-C asks it to stop
        after the step (it saves a checkpoint), a second Ctrl-C at once."""
        # In a session of its own: a terminal's Ctrl-C reaches this process
        # alone, which passes exactly one SIGINT on.
        proc = subprocess.Popen(command, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        other = []

        def relay():
            for line in proc.stderr:
                if line.startswith("step "):
                    continue  # the progress line: the bar shows it
                other.append(line.rstrip())
                if line.startswith("mtrun:"):
                    print("\n" + line.rstrip(), file=sys.stderr)

        def copy():
            for line in proc.stdout:
                log.write(line)
                log.flush()
                m = json.loads(line)
                done, loss = int(m["step"]), m["loss"]
                bar = "#" * (30 * done // steps)
                shown = "nan" if loss is None else f"{loss:.4f}"
                print(f"\rmt: [{bar:<30}] step {done}/{steps} loss {shown}",
                      end="", file=sys.stderr, flush=True)
            proc.wait()

        relaying = threading.Thread(target=relay, daemon=True)
        relaying.start()
        interrupted = False
        try:
            copy()
        except KeyboardInterrupt:
            interrupted = True
            proc.send_signal(signal.SIGINT)
            while True:
                try:  # the stopped step's line too
                    copy()
                    break
                except KeyboardInterrupt:  # again: stop at once
                    proc.send_signal(signal.SIGINT)
        relaying.join()
        print(file=sys.stderr)
        if interrupted or proc.returncode in (130, 143):
            raise KeyboardInterrupt(
                "mt: stopped; train(resume_from_checkpoint=True) continues "
                "from the checkpoint in " + self.output_dir)
        if proc.returncode != 0:
            errors = [l for l in other if "error" in l] or other[-5:]
            raise TrainingError("\n".join(errors) or
                                f"mtrun exited with {proc.returncode}")

    def _load_back(self, out, torch):
        """The newest checkpoint's weights into the module; its step."""
        from safetensors.torch import load_file

        steps = sorted(d for d in os.listdir(out) if d.startswith("step-"))
        if not steps:
            raise TrainingError(f"mt: no checkpoint in {out}")
        newest = os.path.join(out, steps[-1])
        state = {}
        for name in os.listdir(newest):
            if name.endswith(".safetensors") and name != "optimizer.safetensors":
                state.update(load_file(os.path.join(newest, name)))
        own = self.model.state_dict()
        missing = [k for k in state if k not in own]
        if missing:
            raise TrainingError(f"mt: the checkpoint has tensors the model "
                                f"does not: {missing[:5]}")
        with torch.no_grad():
            for k, v in state.items():
                own[k].copy_(v)
        return int(steps[-1].split("-")[1])
