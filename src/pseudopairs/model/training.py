"""Multi-task training of the ranking model (paper §2, §3.1) — the ``train`` step.

Each update runs the run's training objective (:mod:`pseudopairs.model.objectives`; ``sampled``:
draw a task — c2c with probability ``c2c_probability`` when the experiment has c2c data sets,
else c2i — a data set of that task uniformly, and the next batch of its stream; ``joint``: one
batch of images with a caption per data set, the loss summed over every pair of sources), then
one Adam step on the VSE++ loss (with the run's similarity, ``training.similarity``) with
gradient-norm clipping. With ``training.c2c_pool`` (paper 004) the c2c data sets are one data set
of all their pairs (:class:`~pseudopairs.model.batches.PooledC2CData`). Every ``validate_every``
updates — or every ``validate_every_epochs`` epochs (paper 004's monolingual models; an epoch is
one pass of every data set's batch stream) — and at the last update the model is scored on the
validation split: the sum over ``validation.langs`` of R@1+R@5+R@10 in both directions. Training
stops after ``patience`` validations without improvement or at ``max_updates``; the best model is
kept. The training log says which ended it.

c2c warm-up (``training.c2c_warmup``, off by default; :mod:`pseudopairs.model.schedule`): the
authors' code switches the c2c task on only once the c2i loss has left the collapsed plateau —
the loss of a model whose embeddings are all equal, where every hinge is the margin:
``2·B·margin`` per batch for max-violation (B = batch size). With ``c2c_warmup: f`` and the
max-violation loss, c2c is off until a validation at which the mean of the c2i losses since the
previous validation is below ``f`` × that plateau (the authors' threshold 49.0 at batch 128, margin
0.2 is f = 0.95703125); from the next update on it is drawn, and stays on. With the sum of hinges
(``max_violation: false``) there is no warm-up, as in the authors' code. (Under ``joint`` the
image–caption part of each update, scaled to one full batch, is watched, and the caption–caption
pairs join the sum after that validation.) ``c2c_from`` in the checkpoint and the summary: the
update of that validation.

Files in ``out_dir``:
- ``checkpoint.pt`` — best weights + model dimensions + spec + settings + best score and its
  validation metrics; read it back with :func:`pseudopairs.model.checkpoints.load_model`;
- ``vocab.json`` — the run's vocabulary (:func:`pseudopairs.model.inputs.run_vocabulary`: built
  from the run's own training captions, or the fine-tuning source's), which evaluation and mining read;
- ``train_log.csv`` — ``update, task, dataset, loss, val_score`` (one row per update;
  ``val_score`` filled at validation updates).
These three (the rule's outputs) are written atomically once training has FINISHED, checkpoint
first, the log last, so a killed job never leaves files that look complete. While it runs:
- ``last.pt`` — the full training state at the last validation (model, optimizer, stream and
  sampler states, RNG states, counters, log rows, best weights so far), keyed on the run's spec,
  settings and the size and mtime of every input file. A killed run started again with the same
  arguments and unchanged inputs resumes from it and ends with the same weights and log as an
  uninterrupted run (on the CPU); anything else starts afresh. ``load_model`` also reads the best
  weights out of it.
- ``train_log.partial.csv`` — the log so far, rewritten at every validation (for watching a run).
Both are removed once the run has finished and the two final files exist.

A non-finite loss stops training with a RuntimeError naming the update, task and data set; the
``last.pt`` of the last validation (the last good state, with the best weights so far) and the
partial log are kept as they were.
"""

from __future__ import annotations

import argparse
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch
from tqdm import tqdm

from pseudopairs import commands
from pseudopairs.core.io import write_json_atomic, write_text_atomic
from pseudopairs.model.batches import (BatchStream, C2CBatch, C2CData, C2IBatch, C2IData, PooledC2CData,
                                       TaskSampler, c2i_draws, stream_rng)
from pseudopairs.model.checkpoints import (CHECKPOINT_FORMAT, STATE_FORMAT, cpu_state, load_model,
                                           rng_states, save_atomic, seed_everything, set_rng_states)
from pseudopairs.model.encode import validate
from pseudopairs.model.encoders import RankingModel
from pseudopairs.model.inputs import (check_spec, input_stamps, load_data, run_vocabulary,
                                      training_image_statistics)
from pseudopairs.model.objectives import OBJECTIVES
from pseudopairs.model.losses import plateau_loss
from pseudopairs.model.schedule import C2CWarmup, updates_per_epoch, validation_interval
from pseudopairs.model.job import RunSettings, TrainingJob
from pseudopairs.model.settings import TrainingSettings
from pseudopairs.model.text_encoders import check_vocabulary, read_hem_init
from pseudopairs.core.settings import resolve_device

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.pt"
TRAIN_LOG = "train_log.csv"
VOCAB = "vocab.json"
LAST = "last.pt"
PARTIAL_LOG = "train_log.partial.csv"
LOG_COLUMNS = ["update", "task", "dataset", "loss", "val_score"]
# Losses stay on the device and are read back (one synchronisation) every this many updates and
# at every validation; a non-finite one is reported with its own update number.
LOSS_READBACK_EVERY = 50


# --------------------------------------------------------------------------------------------
# The trainer: model, optimiser, batch streams, task sampler
# --------------------------------------------------------------------------------------------


_stream_seed = stream_rng  # a generator per stream, from the run seed and the stream's name


class Trainer:
    """The model, its optimizer, one batch stream per data set, the task sampler and the
    objective's own state (``objective_state``, e.g. the ``joint`` sampler); :meth:`update` is the
    whole per-update work of the run's objective."""

    def __init__(self, model: RankingModel, *, c2i: Sequence[C2IData], c2c: Sequence[C2CData],
                 settings: TrainingSettings, seed: int, device: torch.device | str) -> None:
        self.model = model
        self.device = torch.device(device)
        self.settings = settings
        objective = OBJECTIVES.get(settings.objective)
        self.objective = objective.update_function()
        self.optimizer = torch.optim.Adam(model.parameters(), lr=settings.learning_rate)
        self.data: dict[tuple[str, str], C2IData | C2CData | PooledC2CData] = {}
        self.streams: dict[tuple[str, str], BatchStream] = {}
        # training.c2c_pool (paper 004): the sampled objective draws c2c batches from one pool
        drawn_c2c = [PooledC2CData(c2c)] if settings.c2c_pool and len(c2c) > 1 else list(c2c)
        # training.c2i_sampling (paper 004): a language uniformly, its c2i data sets one pool
        drawn_c2i = c2i_draws(c2i, sampling=settings.c2i_sampling)
        for dataset in [*drawn_c2i, *drawn_c2c]:
            key = (dataset.task, dataset.name)
            if len(dataset) < 2:
                raise ValueError(f"data set {dataset.name}: {len(dataset)} item(s); a contrastive "
                                 "batch needs at least 2")
            self.data[key] = dataset
            self.streams[key] = BatchStream(len(dataset), settings.batch_size,
                                            rng=_stream_seed(seed, f"{dataset.task}:{dataset.name}"))
        self.sampler = TaskSampler(c2i=[d.name for d in drawn_c2i], c2c=[d.name for d in drawn_c2c],
                                   c2c_probability=settings.c2c_probability,
                                   rng=_stream_seed(seed, "task-sampler"))
        self.warmup = C2CWarmup.for_run(
            c2c_warmup=settings.c2c_warmup, has_c2c=bool(c2c),
            max_violation=settings.max_violation,
            plateau=plateau_loss(batch_size=settings.batch_size, margin=settings.margin,
                                 max_violation=settings.max_violation))
        setup = objective.setup_function()
        self.objective_state = setup(self, c2i=c2i, c2c=c2c, seed=seed) if setup else None

    @property
    def c2c_enabled(self) -> bool:
        """Whether c2c is on (no warm-up, or the warm-up has ended)."""
        return self.warmup.enabled

    def epoch_updates(self) -> int:
        """Updates of one epoch: one pass of every batch stream (:mod:`pseudopairs.model.schedule`)."""
        return updates_per_epoch([s.n_items for s in self.streams.values()],
                                 batch_size=self.settings.batch_size)

    def update(self) -> tuple[str, str, torch.Tensor]:
        """One training update of the run's objective: (task, data set, detached loss)."""
        return self.objective(self)

    def objective_parameters(self) -> int:
        """Parameters the objective trains besides the model's and drops after training (the
        smalr objective's MCLM heads and language classifier; 0 for the others)."""
        count = getattr(self.objective_state, "training_only_parameters", None)
        return int(count()) if count is not None else 0

    def next_batch(self) -> tuple[str, str, C2IBatch | C2CBatch]:
        """The sampled objective's next (task, data set, batch), on the CPU: one draw of the
        task sampler, then of that data set's batch stream (benchmarks/training.py replays it)."""
        task, name = self.sampler.draw(c2c_enabled=self.c2c_enabled)
        key = (task, name)
        return task, name, self.data[key].batch(self.streams[key].next())

    def note_c2i_loss(self, loss: torch.Tensor) -> None:
        """The c2c warm-up (module docstring): an objective reports each update's c2i loss (of one
        full batch; kept on the device, read at the validation that decides)."""
        self.warmup.note(loss)

    def state_dict(self) -> dict:
        state = {"optimizer": self.optimizer.state_dict(), "sampler": self.sampler.state_dict(),
                 "streams": {f"{t}:{n}": s.state_dict() for (t, n), s in self.streams.items()},
                 "warmup": self.warmup.state_dict()}
        if self.objective_state is not None:
            state["objective"] = self.objective_state.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        streams = state["streams"]
        expected = {f"{t}:{n}" for t, n in self.streams}
        if set(streams) != expected:
            raise ValueError(f"saved streams {sorted(streams)} differ from {sorted(expected)}")
        for (task, name), stream in self.streams.items():
            stream.load_state_dict(streams[f"{task}:{name}"])
        self.sampler.load_state_dict(state["sampler"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.warmup.load_state_dict(state["warmup"])
        if self.objective_state is not None:
            self.objective_state.load_state_dict(state["objective"])


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


@dataclass
class _Progress:
    update: int = 0
    best_score: float = -math.inf
    best_update: int = 0
    best_metrics: dict = field(default_factory=dict)
    bad_validations: int = 0
    finished: bool = False
    stop_reason: str = ""
    rows: list = field(default_factory=list)          # [update, task, dataset, loss, val_score]
    validations: list = field(default_factory=list)   # {"update", "score", "metrics"}
    best_state: dict | None = None
    c2c_from: int | None = None                        # update at which the c2c warm-up ended


def _write_log(path: Path, rows: list) -> None:
    frame = pd.DataFrame(rows, columns=LOG_COLUMNS)
    frame["val_score"] = frame["val_score"].astype("float64")
    write_text_atomic(path, frame.to_csv(index=False))


def _build_model(spec: dict, settings: RunSettings, *, vocab, image_dim: int, c2i) -> RankingModel:
    """The run's model; every step after training rebuilds it from the checkpoint
    (:func:`~pseudopairs.model.checkpoints.load_model`). A ``hem`` text encoder starts from the
    rows and assignment of ``spec["text_init"]`` (the pretrain-hem step's output)."""
    dims = settings.model
    encoder = dims.text_encoder
    check_vocabulary(vocab, encoder, where=f"spec: vocab of {spec['experiment']}")
    text_init, options = None, {}
    if encoder == "hem":
        if not spec.get("text_init"):
            raise ValueError(f"spec: {spec['experiment']} uses model.text_encoder hem but gives no "
                             "text_init (the pretrain_hem step's initial rows)")
        text_init = read_hem_init(spec["text_init"], vocab)
        options = {"rows": int(text_init["weight"].shape[0]),
                   "row_dim": int(text_init["weight"].shape[1]),
                   "pretraining_parameters": int(text_init.pop("pretraining_parameters"))}
    model = RankingModel(len(vocab), embedding_dim=dims.embedding_dim,
                         joint_dim=dims.joint_dim, image_dim=image_dim,
                         image_normalization=dims.image_normalization,
                         similarity=settings.training.similarity, text_encoder=encoder,
                         text_options=options, image_layers=dims.image_layers,
                         image_hidden=dims.image_hidden, text_projection=dims.text_projection)
    if text_init is not None:
        model.set_text_embedding(**text_init)
    if dims.image_normalization == "standardize":
        mean, std = training_image_statistics(c2i)
        model.set_image_standardization(mean=mean, std=std)
    if spec["init_from"]:
        source, meta = load_model(spec["init_from"])
        if source.image_dim != model.image_dim:
            raise ValueError(f"spec: init_from {spec['init_from']} was trained on {source.image_dim}-d "
                             f"image features; this run's features are {model.image_dim}-d (another "
                             "features.arch): fine-tune on features of the network it was trained on")
        if source.config() != model.config():
            raise ValueError(f"spec: init_from {spec['init_from']} has dims {source.config()}, "
                             f"this run needs {model.config()}")
        model.load_state_dict(source.state_dict())
        log.info("fine-tuning from %s (update %s, score %.2f)", spec["init_from"],
                 meta.get("update"), meta.get("best_score", float("nan")))
    return model


class _Run:
    """One training run: set up (or resume), the update loop with validations, the outputs."""

    def __init__(self, *, spec: dict, settings: RunSettings | dict, out_dir, seed: int,
                 compute: str = "separate", feature_cache: dict | None = None) -> None:
        self.arguments = {"spec": spec, "settings": settings, "out_dir": out_dir, "seed": seed,
                          "compute": compute, "feature_cache": feature_cache}
        self.spec = spec = check_spec(spec)
        self.run_settings = RunSettings.from_dict(settings)
        self.settings = training = self.run_settings.training
        self.seed = seed = int(seed)
        self.out_dir = out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        if training.threads > 0:
            torch.set_num_threads(training.threads)
        device = torch.device(resolve_device(training.device, key="training.device"))
        if device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = training.tf32
            torch.backends.cudnn.allow_tf32 = training.tf32
        self.vocab = vocab = run_vocabulary(spec)
        c2i, c2c, self.val_sets, image_dim = load_data(spec, vocab, feature_cache=feature_cache)
        if c2c and training.c2c_probability == 0 and training.objective == "sampled":
            log.warning("%s: c2c data sets given but c2c_probability is 0; they are never used",
                        spec["experiment"])
        seed_everything(seed)
        self.model = _build_model(spec, self.run_settings, vocab=vocab, image_dim=image_dim, c2i=c2i)
        self.model.to(device)
        self.trainer = Trainer(self.model, c2i=c2i, c2c=c2c, settings=training, seed=seed, device=device)
        self.device = device
        # updates between validations (training.validate_every, or validate_every_epochs epochs)
        self.validate_every = validation_interval(
            validate_every=training.validate_every,
            validate_every_epochs=training.validate_every_epochs,
            epoch_updates=self.trainer.epoch_updates())
        self.run_key = {"spec": spec, "seed": seed, "vocab_size": len(vocab), "compute": compute,
                        "settings": self.run_settings.run_key(), "inputs": input_stamps(spec)}
        self.progress = _Progress()
        self.last_path, self.ckpt_path = out_dir / LAST, out_dir / CHECKPOINT
        self.log_path, self.vocab_path = out_dir / TRAIN_LOG, out_dir / VOCAB
        self.partial_log_path = out_dir / PARTIAL_LOG
        self.pending: list[tuple[int, str, str, torch.Tensor]] = []
        # the optimiser state to save when the run is one model of a batched stack (its slice of
        # the stack's Adam, as torch.optim.Adam's state dict); None: the trainer's own optimiser
        self.optimizer_state = None
        self.saved_at: int | None = None

    def resume(self) -> None:
        """Continue from ``last.pt`` when it was written for this very run; drop stale files."""
        last_path = self.last_path
        if last_path.exists():
            try:
                state = torch.load(last_path, map_location="cpu", weights_only=True)
            except Exception as err:  # noqa: BLE001 — a damaged resume state is recomputed, not fatal
                log.warning("%s is unreadable (%s: %s); starting afresh", last_path, type(err).__name__, err)
                state = {}
            if isinstance(state, dict) and state.get("format") == STATE_FORMAT and state.get("run_key") == self.run_key:
                self.model.load_state_dict(state["model"])
                self.trainer.load_state_dict(state["trainer"])
                set_rng_states(state["rng"])
                self.progress = _Progress(**state["progress"])
                log.info("resuming %s seed %d from %s at update %d", self.spec["experiment"], self.seed,
                         last_path, self.progress.update)
            else:
                log.warning("%s was written for other inputs or settings; starting afresh", last_path)
                last_path.unlink()
        # The final files are written when training finishes; any present now are from another run.
        stale = (self.ckpt_path, self.vocab_path, self.log_path)
        for path in stale + (() if last_path.exists() else (self.partial_log_path,)):
            path.unlink(missing_ok=True)

    def save_state(self) -> None:
        trainer = self.trainer.state_dict()
        if self.optimizer_state is not None:
            trainer["optimizer"] = self.optimizer_state()
        progress = dict(self.progress.__dict__)
        if progress["best_state"] is not None:
            progress["best_state"] = _on_cpu(progress["best_state"])
        save_atomic(self.last_path, {
            "format": STATE_FORMAT, "run_key": self.run_key, "model_config": self.model.config(),
            "model": cpu_state(self.model), "trainer": trainer,
            "rng": rng_states(), "progress": progress})
        self.saved_at = self.progress.update

    def state_due(self) -> bool:
        """Whether this validation saves ``last.pt``: every ``resume_every`` updates (0: every
        validation), and always when the run has finished (a stack keeps finished models' states
        until its last model finishes, so a killed stack job loses none of them)."""
        every = self.settings.resume_every
        p = self.progress
        return (p.finished or not every or self.saved_at is None
                or p.update - self.saved_at >= every)

    def stop_non_finite(self, what: str) -> None:
        kept = (f"the state last saved (at the validation of update {self.saved_at}) is kept in "
                f"{self.last_path} (pseudopairs.model.checkpoints.load_model reads its best "
                "weights); rerunning with the same settings resumes from it and meets the same "
                "failure, so change them (e.g. a lower learning_rate) to start afresh"
                if self.saved_at is not None else
                "no state had been saved yet, so no checkpoint was written")
        raise RuntimeError(f"{self.spec['experiment']} seed {self.seed}: {what}; training stopped; {kept}")

    def read_losses(self) -> None:
        values = torch.stack([p[3] for p in self.pending]).float().cpu().tolist()
        for (update, task, name, _), value in zip(self.pending, values):
            if not math.isfinite(value):
                self.stop_non_finite(f"non-finite training loss ({value}) at update {update} "
                                     f"(task {task}, data set {name})")
            self.progress.rows.append([update, task, name, value, None])
        self.pending.clear()

    def validation(self) -> None:
        """Score the model, keep it if best, decide whether to stop; save the resumable state."""
        p, settings = self.progress, self.settings
        bad = [k for k, v in self.model.named_parameters() if not bool(torch.isfinite(v).all())]
        if bad:
            self.stop_non_finite(f"non-finite weights ({', '.join(bad)}) after update {p.update}")
        score, metrics = validate(self.model, self.val_sets)  # ranked on the training device
        p.rows[-1][4] = float(score)
        if self.trainer.warmup.at_validation():  # c2c from the next update
            p.c2c_from = p.update
            log.info("%s seed %d update %d: the mean c2i loss since the last validation left the "
                     "collapsed plateau; c2c switched on", self.spec["experiment"], self.seed, p.update)
        p.validations.append({"update": p.update, "score": float(score), "metrics": metrics})
        if score > p.best_score:
            p.best_score, p.best_update = float(score), p.update
            p.best_metrics, p.best_state = metrics, _on_device_copy(self.model)
            p.bad_validations = 0
        else:
            p.bad_validations += 1
        if p.bad_validations >= settings.patience:
            p.finished, p.stop_reason = True, f"early stopping: no improvement in {settings.patience} validations"
        elif p.update >= settings.max_updates:
            p.finished, p.stop_reason = True, f"reached max_updates={settings.max_updates} (still improving: raise it)"
            log.warning("%s seed %d: stopped by the max_updates guard (%d), not by early stopping: "
                        "the model was still improving; raise training.max_updates",
                        self.spec["experiment"], self.seed, settings.max_updates)
        log.info("%s update %d: validation score %.2f (best %.2f at update %d)%s",
                 self.spec["experiment"], p.update, score, p.best_score, p.best_update,
                 f"; stopping: {p.stop_reason}" if p.finished else "")
        if self.state_due():
            _write_log(self.partial_log_path, p.rows)
            self.save_state()

    def validation_due(self) -> bool:
        """Whether the update just taken ends with a validation (every ``validate_every`` updates
        of this run, and at ``max_updates``)."""
        update = self.progress.update
        return update % self.validate_every == 0 or update >= self.settings.max_updates

    def loop(self) -> None:
        p, settings = self.progress, self.settings
        bar = tqdm(total=settings.max_updates, initial=p.update, desc=f"train {self.spec['experiment']}",
                   mininterval=10, unit="upd")
        while not p.finished:
            task, name, loss = self.trainer.update()
            p.update += 1
            bar.update(1)
            self.pending.append((p.update, task, name, loss))
            at_validation = self.validation_due()
            if at_validation or len(self.pending) >= LOSS_READBACK_EVERY:
                self.read_losses()
            if at_validation:
                self.validation()
                bar.set_postfix(best=f"{p.best_score:.1f}", refresh=False)
        bar.close()

    def finish(self, *, keep_state: bool = False) -> dict:
        """Write the outputs (checkpoint first, the log last), then drop the resumable state
        (``keep_state``: a stack job drops its models' states once its last model has finished)."""
        p = self.progress
        save_atomic(self.ckpt_path, {
            "format": CHECKPOINT_FORMAT, "model_state": _on_cpu(p.best_state), **self.model.config(),
            "spec": self.spec, "seed": self.seed,
            "settings": {"training": self.settings.to_dict(), "model": self.run_settings.model.to_dict()},
            "best_score": p.best_score, "val_score": p.best_score, "update": p.best_update,
            "val_metrics": p.best_metrics, "stop_reason": p.stop_reason, "updates": p.update,
            "c2c_from": p.c2c_from, "objective_parameters": self.trainer.objective_parameters()})
        write_json_atomic(self.vocab_path, self.vocab.to_json())
        _write_log(self.log_path, p.rows)
        if not keep_state:
            self.drop_state()
        return {"experiment": self.spec["experiment"], "seed": self.seed, "best_score": p.best_score,
                "val_score": p.best_score, "best_update": p.best_update, "updates": p.update,
                "stop_reason": p.stop_reason, "val_metrics": p.best_metrics, "c2c_from": p.c2c_from}


    def drop_state(self) -> None:
        self.last_path.unlink(missing_ok=True)
        self.partial_log_path.unlink(missing_ok=True)


def _on_device_copy(model: torch.nn.Module) -> dict:
    """The model's weights, copied where they are (no device→host transfer at each new best)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _on_cpu(state: dict | None) -> dict | None:
    return None if state is None else {k: v.to("cpu") for k, v in state.items()}


def train(*, spec: dict, settings: RunSettings | dict, out_dir, seed: int) -> dict:
    """Train one experiment for one seed; see the module docstring for the files written.

    ``spec``: ``{"experiment": str, "c2i": [{"name", "captions", "features", "lang"}, ...],
    "c2c": [{"name", "a": {...}, "b": {...}}, ...], "validation": {"captions", "features",
    "langs": [...]}, "vocab": {"min_count": N} | {"path": vocabulary JSON}, "init_from": null |
    checkpoint path}`` (``init_from``: start from that model's best weights with a fresh
    optimizer; see :func:`pseudopairs.model.inputs.run_vocabulary` for ``vocab``). ``settings``:
    the experiment's ``training`` and ``model`` sections
    (:class:`~pseudopairs.model.job.RunSettings`, or its JSON ``{"training": {…}, "model": {…}}``).
    Returns a summary (best score and update, updates run, stop reason, per-language metrics).
    """
    run = _Run(spec=spec, settings=settings, out_dir=out_dir, seed=seed)
    run.resume()
    run.loop()
    return run.finish()


def summary_line(summary: dict, out_dir) -> str:
    return (f"trained {summary['experiment']} seed {summary['seed']}: best validation score "
            f"{summary['best_score']:.2f} at update {summary['best_update']} of {summary['updates']} "
            f"({summary['stop_reason']}) -> {Path(out_dir) / CHECKPOINT}")
