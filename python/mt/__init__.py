"""mt from Python: fine-tune a PyTorch or Hugging Face model with mtc and
mtrun, the way Hugging Face's Trainer is used.

    import mt
    mt.init(offload_dir="/mnt/nvme/mt", max_vram_gb=80)
    trainer = mt.Trainer(model=model, train_dataset=examples, args=args)
    trainer.train()

The package only drives the tools: it exports the model to ONNX, writes the
examples as JSON lines, runs `mtc` (which plans the step for the budgets
given to `init`) and `mtrun` (which trains and checkpoints), and loads the
trained weights back into the module. Import it with PYTHONPATH=python from
the repository (no installation); it finds the built tools in build/bin, in
$MT_BIN, or on PATH.
"""
from .config import Config, init
from .trainer import TrainingError, TrainOutput, Trainer

__all__ = ["Config", "init", "Trainer", "TrainOutput", "TrainingError"]
