"""When a training run validates and when its c2c warm-up ends: small pure rules, no torch.

The c2c warm-up, as the authors' code does it (mulisera ``train.py`` from February 2019, the
code paper 000 names; paper 000's text is silent): with the max-violation loss, c2c is off at the
start; every c2i loss is kept; at each *validation* the mean of the c2i losses kept since the
previous validation is compared with the threshold — below it, c2c is on from the next update
and stays on; otherwise the kept losses are dropped and the next period is judged on its own.
With the sum of hinges there is no warm-up (their ``start_up`` is set only for max-violation):
c2c is drawn from the first update. Their threshold is the constant 49.0 at batch 128, margin 0.2;
here it is ``c2c_warmup`` × :func:`~pseudopairs.model.losses.plateau_loss`: 49.0 exactly with
``c2c_warmup: 0.95703125`` (= 245/256 = 49 / 51.2, exact in binary; config/paper.yaml), and it
scales with the batch size and the margin (0.95703125 × 2·B·margin: 24.5 at batch 64).

Validation every ``validate_every`` updates, or (``validate_every_epochs``) every that many
epochs: paper 004 validates its monolingual models once per epoch (its code loops over epochs
of the one data set) and its multilingual ones every 500 updates. An epoch here is one pass of
every batch stream of the run: Σ ⌊n / B⌋ updates over its data sets (the streams drop the
partial last batch; a set smaller than a batch is one batch) — for a run on one data set, one
pass over it.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence


def warmup_over(c2i_losses: Sequence[float], *, threshold: float) -> bool:
    """Whether the c2c warm-up ends at this validation: the mean of the c2i losses since the
    previous validation is below ``threshold`` (no c2i loss in the period: it does not end)."""
    return len(c2i_losses) > 0 and math.fsum(c2i_losses) / len(c2i_losses) < threshold


class C2CWarmup:
    """The warm-up's state in a run: whether c2c is on, and the c2i losses of the current
    validation period. ``threshold`` None: no warm-up (c2c on from the start)."""

    def __init__(self, threshold: float | None) -> None:
        self.threshold = threshold
        self.enabled = threshold is None
        self.losses: list = []      # floats, or device scalars read back at the validation

    @classmethod
    def for_run(cls, *, c2c_warmup: float | None, has_c2c: bool, max_violation: bool,
                plateau: float) -> "C2CWarmup":
        """A warm-up only with ``c2c_warmup`` set, c2c data to wait for, and max-violation."""
        if c2c_warmup and has_c2c and max_violation:
            return cls(c2c_warmup * plateau)
        return cls(None)

    def note(self, loss) -> None:
        """An update's c2i loss (a float or a 0-d tensor; kept as given, read at validation)."""
        if not self.enabled:
            self.losses.append(loss)

    def at_validation(self) -> bool:
        """Decide at a validation; True when c2c has just been switched on."""
        if self.enabled:
            return False
        losses = [float(x) for x in self.losses]
        self.losses = []
        self.enabled = warmup_over(losses, threshold=self.threshold)
        return self.enabled

    def state_dict(self) -> dict:
        return {"enabled": self.enabled, "losses": [float(x) for x in self.losses]}

    def load_state_dict(self, state: dict) -> None:
        self.enabled = bool(state["enabled"])
        self.losses = [float(x) for x in state["losses"]]


def updates_per_epoch(sizes: Iterable[int], *, batch_size: int) -> int:
    """Updates of one pass over data sets of ``sizes`` items in batches of ``batch_size`` (the
    partial last batch dropped; a set smaller than a batch is one batch)."""
    total = sum(max(1, int(n) // int(batch_size)) for n in sizes)
    if total < 1:
        raise ValueError("updates_per_epoch: a run needs at least one data set")
    return total


def validation_interval(*, validate_every: int, validate_every_epochs: int | None,
                        epoch_updates: int) -> int:
    """Updates between validations: ``validate_every``, or ``validate_every_epochs`` epochs of
    ``epoch_updates`` updates when that is set."""
    if validate_every_epochs is None:
        return int(validate_every)
    return int(validate_every_epochs) * int(epoch_updates)
