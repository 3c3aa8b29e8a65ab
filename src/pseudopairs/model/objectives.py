"""Training objectives: what one update computes. One registry entry each (config key
``training.objective``).

``sampled`` (papers 000 and 004; DESIGN §1): each update draws a task — c2c with probability
``c2c_probability`` when the experiment has c2c data sets (and the c2c warm-up, if any, has
ended), else c2i — then a data set of that task uniformly and the next batch of its stream, and
takes one optimiser step on the ranking loss of that batch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from pseudopairs.registry import Registry


@dataclass(frozen=True)
class Objective:
    name: str
    summary: str
    # "module:function" of one update of a Trainer, returning (task, data set name, detached
    # loss); imported when a run uses it, so the registry itself needs no torch.
    step: str

    def step_function(self) -> Callable:
        module, function = self.step.split(":")
        return getattr(importlib.import_module(module), function)


OBJECTIVES: Registry[Objective] = Registry("training objective", modules=("pseudopairs.model.objectives",))


OBJECTIVES.register("sampled", Objective(
    name="sampled", step="pseudopairs.model.steps:sampled_step",
    summary="one task per update (c2c with probability c2c_probability, else c2i), one data set "
            "of it uniformly, one batch (papers 000, 004)"))
