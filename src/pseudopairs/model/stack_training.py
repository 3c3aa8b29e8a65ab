"""The ``train`` step: the seeds of one experiment's stack trained in one job (a
:class:`~pseudopairs.model.job.TrainingJob`; a stack of one seed is one model trained alone).

Each model is a run of its own (:class:`pseudopairs.model.training._Run`): its seed, spec (a
pseudopair data set or fine-tuning source of its own seed), vocabulary, batch streams, task
draws, c2c warm-up, validations, early stopping, and its files where a job of its own writes
them (``results/models/{experiment}/seed{seed}/``: ``checkpoint.pt``, ``vocab.json``,
``train_log.csv``; ``last.pt`` while it runs). How the job's models share the device is
``training.stack_compute``:

- ``batched``: one :class:`~pseudopairs.model.stack.StackedRankingModel`; each update draws every
  model's batch from its own trainer and runs them as one batched forward/backward
  (:func:`~pseudopairs.model.stack.stacked_update`). At each of a model's validations (its own
  schedule: ``validate_every_epochs`` counts its own data's epochs) its weights are copied into
  its run and validated as a separate run's would be, and its c2c warm-up decided. A model that
  stops leaves the stack; the others go on.
- ``separate``: the models one after the other, each exactly as ``train`` trains it alone (a
  stack of one is always this).
- ``auto``: ``batched`` on a GPU, ``separate`` on the CPU (measured: ``docs/benchmarks.md``).

A batched stack on a GPU replays each update as a CUDA graph (``training.cuda_graphs``,
:class:`~pseudopairs.model.stack_graph.StaticStackUpdate`).

Resuming: a finished model's ``last.pt`` (its final state) is kept until the whole job has
finished, so a killed job started again rewrites the finished models' files from their states
and resumes the others from theirs — the same result as an uninterrupted job (on the CPU). The
unfinished models of a batched stack resume together; if their saved states are not all of the
same update (a kill between two of their saves), they start afresh (the same result, later).
"""

from __future__ import annotations

import argparse
import logging
from typing import Sequence

import torch
from tqdm import tqdm

from pseudopairs import commands
from pseudopairs.model.batches import C2IBatch
from pseudopairs.model.job import RunSettings, TrainingJob
from pseudopairs.model.stack import StackedAdam, StackedRankingModel, stack_supported, stacked_update
from pseudopairs.model.stack_graph import StaticStackUpdate
from pseudopairs.model.training import LOSS_READBACK_EVERY, _Run, summary_line
from pseudopairs.core.settings import SettingsError, resolve_device

log = logging.getLogger(__name__)


def stack_compute(settings: RunSettings, *, device: str, n_models: int) -> str:
    """``batched`` or ``separate`` for a job of ``n_models`` with these settings."""
    choice = settings.training.stack_compute
    if n_models < 2:
        return "separate"
    why_not = stack_supported(settings)
    if choice == "batched" and why_not:
        log.warning("training.stack_compute batched: not for %s; the models train one after the other",
                    why_not)
        return "separate"
    if choice == "auto":
        return "batched" if torch.device(device).type == "cuda" and not why_not else "separate"
    return choice


def check_compiler() -> None:
    """``training.stack_compile`` builds kernels with a C compiler (inductor's C++ on the CPU,
    Triton's launchers on a GPU): say at once when the node has none, not at the first update."""
    import os
    import shutil

    if not any(shutil.which(name) for name in (os.environ.get("CC", "cc"), "gcc", "clang")):
        raise SettingsError("training.stack_compile: torch.compile needs a C compiler (cc, gcc or clang) "
                            "on the node and none is on PATH (the workflow's container image has none): "
                            "install one, or set training.stack_compile: false")


class _StackLoop:
    """The update loop of a batched stack over the unfinished runs."""

    def __init__(self, runs: Sequence[_Run]) -> None:
        self.runs = list(runs)
        settings = self.runs[0].settings
        self.options = {"margin": settings.margin, "max_violation": settings.max_violation,
                        "grad_clip": settings.grad_clip, "similarity": settings.similarity}
        self.stack = StackedRankingModel([r.model for r in self.runs])
        self.stack.precision = settings.stack_precision
        self.stack.compile = settings.stack_compile
        if self.stack.compile:
            check_compiler()
        self.optimizer = StackedAdam(self.stack.parameters_in_order(), lr=settings.learning_rate)
        for s, run in enumerate(self.runs):  # resumed runs bring their Adam state
            self.optimizer.load_torch_state(s, run.trainer.optimizer.state_dict())
            run.optimizer_state = self._state_of(run)
        # on a GPU, each update replayed as a CUDA graph (training.cuda_graphs; stack_graph)
        self.graphed = None
        if settings.cuda_graphs and self.stack.device.type == "cuda" and settings.similarity == "cosine":
            self.graphed = StaticStackUpdate(self.stack, self.optimizer, pinned=settings.pinned_memory,
                                             **self.options)

    def _state_of(self, run: _Run):
        groups = run.trainer.optimizer.state_dict()["param_groups"]

        def state() -> dict:
            s = self.runs.index(run)
            return self.optimizer.torch_state(s, vocab_size=run.model.vocab_size, param_groups=groups)
        return state

    def run(self) -> None:
        settings = self.runs[0].settings
        bar = tqdm(total=settings.max_updates, initial=self.runs[0].progress.update, mininterval=10,
                   unit="upd", desc=f"train {self.runs[0].spec['experiment']} × {len(self.runs)}")
        while self.runs:
            draws = []
            for run in self.runs:
                task, name, batch = run.trainer.next_batch()
                draws.append((task, name, batch))
            batches = [d[2] for d in draws]
            losses = (self.graphed(batches) if self.graphed is not None
                      else stacked_update(self.stack, self.optimizer, batches, **self.options))
            bar.update(1)
            for s, (run, (task, name, batch)) in enumerate(zip(self.runs, draws)):
                if isinstance(batch, C2IBatch):
                    run.trainer.note_c2i_loss(losses[s])
                run.progress.update += 1
                run.pending.append((run.progress.update, task, name, losses[s]))
            # each model validates on its own schedule (validate_every_epochs: its own data's
            # epoch) and decides its own c2c warm-up there
            due = [run.validation_due() for run in self.runs]
            if any(due) or len(self.runs[0].pending) >= LOSS_READBACK_EVERY:
                for run in self.runs:
                    run.read_losses()
            if any(due):
                self.validate(due)
        bar.close()

    def validate(self, due: Sequence[bool]) -> None:
        """Validate the models whose validation is ``due``; the finished ones leave the stack."""
        for s, (run, now) in enumerate(zip(self.runs, due)):
            if now:
                self.stack.copy_into(s, run.model)
                run.validation()
        done = [r for r in self.runs if r.progress.finished]
        for run in done:  # its final state is in its last.pt; train_stack writes its files
            log.info("%s seed %d finished (%s); %d model(s) go on", run.spec["experiment"], run.seed,
                     run.progress.stop_reason, len(self.runs) - len(done))
        if done:
            keep = [s for s, r in enumerate(self.runs) if not r.progress.finished]
            self.runs = [self.runs[s] for s in keep]
            if keep:
                self.stack.select(keep)
                self.optimizer.select(keep, self.stack.parameters_in_order())
                if self.graphed is not None:  # the graphs hold the old tensors
                    self.graphed.reset()


def train_stack(*, jobs: Sequence[dict], settings: RunSettings | dict) -> list[dict]:
    """Train the models of one stack in one job (see the module docstring). ``jobs``:
    ``[{"seed": int, "spec": training spec, "out_dir": model directory}, ...]``; ``settings``:
    as :func:`pseudopairs.model.training.train`'s. Returns each model's summary, in ``jobs``' order."""
    if not jobs:
        raise ValueError("train: no models to train")
    seeds = [int(job["seed"]) for job in jobs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"train: seeds {seeds} repeat")
    settings = RunSettings.from_dict(settings)
    device = resolve_device(settings.training.device, key="training.device")
    compute = stack_compute(settings, device=device, n_models=len(jobs))
    features: dict = {}
    runs = []
    for job in jobs:
        run = _Run(spec=job["spec"], settings=settings, out_dir=job["out_dir"], seed=job["seed"],
                   compute=compute, feature_cache=features)
        run.resume()
        runs.append(run)
    log.info("%s: %d model(s) (seeds %s), %s", runs[0].spec["experiment"], len(runs), seeds, compute)
    if compute == "batched":
        active = [r for r in runs if not r.progress.finished]
        if len({r.progress.update for r in active}) > 1:
            log.warning("the unfinished models' states are of different updates (%s); they start afresh",
                        sorted({r.progress.update for r in active}))
            for r in active:
                r.last_path.unlink(missing_ok=True)
            fresh = {id(r): _Run(**r.arguments) for r in active}
            runs = [fresh.get(id(r), r) for r in runs]
            active = [fresh[id(r)] for r in active]
            for r in active:
                r.resume()
        if active:
            _StackLoop(active).run()
    summaries = []
    for run in runs:
        if compute != "batched":
            run.loop()
        summaries.append(run.finish(keep_state=True))
    for run in runs:  # every model has its files: the resumable states can go
        run.drop_state()
    return summaries


def train_job(job: TrainingJob, *, threads: int | None = None) -> list[dict]:
    """The ``train`` job: its models (a seed, or a stack's seeds) with its settings, on
    ``threads`` CPU threads (the scheduler's grant; None: the job's own)."""
    jobs = [{"seed": int(seed), "spec": model.spec, "out_dir": model.out_dir}
            for seed, model in job.models.items()]
    return train_stack(jobs=jobs, settings=job.settings.with_threads(threads))


def _cli_train(args: argparse.Namespace) -> None:
    job = TrainingJob.from_dict(args.job)
    for summary, model in zip(train_job(job, threads=args.threads), job.models.values()):
        print(summary_line(summary, model.out_dir))


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "train", _cli_train)
    commands.add_json(p, "--job", "the training job: an experiment's settings and its models by seed, "
                                  "{seed: {spec, out_dir}} (model.contract.training_job)")
    commands.add_threads(p)
