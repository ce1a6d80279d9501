"""The name the project's seed used: `import megatrain as mt` is `import mt`."""
from mt import *  # noqa: F401,F403
from mt import Config, Trainer, TrainingError, TrainOutput, init  # noqa: F401
