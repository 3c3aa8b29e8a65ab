"""Settings of a training run: the config's ``training`` and ``model`` sections (checked here
without importing torch, so the workflow's config checks stay fast)."""

from __future__ import annotations

from dataclasses import dataclass

from pseudopairs.model.objectives import OBJECTIVES
from pseudopairs.model.text_encoders import TEXT_ENCODERS
from pseudopairs.core.settings import Settings, SettingsError, device_setting, setting
from pseudopairs.similarity.functions import SIMILARITIES

# How stored image features enter the affine layer: as they are (``raw``), L2-normalised per
# image (``l2``, what the authors' code does), or standardised per dimension with the training
# images' mean and standard deviation (``standardize``, the demo's random-weight features).
IMAGE_NORMALIZATIONS = ("raw", "l2", "standardize")
# How the models of one training job share the device (training.stack_compute).
STACK_COMPUTE = ("auto", "batched", "separate")
# How the sampled objective picks a c2i update's data (training.c2i_sampling; model/batches.py).
C2I_SAMPLING = ("dataset", "language")
# The batched products of a batched stack (training.stack_precision).
STACK_PRECISIONS = ("float32", "bf16")


@dataclass(frozen=True)
class TrainingSettings(Settings):
    """The config's ``training`` section (an experiment may override entries)."""

    SECTION = "training"

    batch_size: int = setting(kind=int, low=2, doc="items per batch (paper: 128)")
    learning_rate: float = setting(kind=float, low=0, low_open=True, doc="Adam, no decay (paper: 2e-4)")
    grad_clip: float = setting(kind=float, low=0, doc="gradient-norm clip; 0 = none (paper: 2)")
    margin: float = setting(kind=float, low=0, doc="hinge margin (paper: 0.2)")
    max_violation: bool = setting(kind=bool, doc="hardest negative (paper) or the sum over negatives")
    c2c_probability: float = setting(kind=float, low=0, high=1, doc="p of a c2c update (paper: 0.5)")
    validate_every: int = setting(kind=int, low=1, doc="updates between validations (paper: 500)")
    patience: int = setting(kind=int, low=1, doc="validations without improvement before stopping (paper: 10)")
    max_updates: int = setting(kind=int, low=1, doc="a guard: no run should reach it")
    c2c_warmup: float | None = setting(None, kind=float, low=0, high=1, low_open=True, optional=True,
                                       doc="with max_violation: c2c only once the mean c2i loss "
                                           "since the last validation < this × the collapsed "
                                           "plateau, checked at validations (paper 000's code); "
                                           "null: c2c from the first update")
    validate_every_epochs: int | None = setting(None, kind=int, low=1, optional=True,
                                                doc="validate every this many epochs instead (an "
                                                    "epoch: one pass of every data set's batches; "
                                                    "paper 004's monolingual models: 1)")
    c2c_pool: bool = setting(False, kind=bool,
                             doc="all c2c pairs of the experiment one data set, a batch mixing "
                                 "language pairs (paper 004) instead of a c2c data set drawn "
                                 "uniformly, then a batch of it (paper 000)")
    c2i_sampling: str = setting("dataset", kind=str, choices=C2I_SAMPLING,
                                doc="sampled: how a c2i update picks its data: dataset (one c2i "
                                    "data set uniformly, paper 000's code) | language (a language "
                                    "uniformly, then a batch of all its c2i data sets' pairs as one "
                                    "data set: paper 004 §3, 'a language is sampled at random "
                                    "followed by sampling a random batch'). The same with one data "
                                    "set per language")
    objective: str = setting("sampled", kind=str,
                             doc="a registered training objective: sampled (one task per update; papers "
                                 "000, 004) | joint (the loss summed over every pair of sources of a "
                                 "batch of images; paper 003) | smalr (joint's batches, 002's Eq. 3 on "
                                 "unmasked and masked captions + MULE's constraints + MCLM; paper 002)")
    similarity: str = setting("cosine", kind=str,
                              doc="a registered similarity function: cosine | order (−‖max(0, c − v)‖² "
                                  "of image v and caption c on non-negative embeddings; paper 001, "
                                  "margin 0.05 there)")
    device: str = device_setting("the training and evaluation jobs")
    threads: int = setting(1, kind=int, low=0, doc="torch CPU threads (0: torch's default)")
    stack: list = setting([1], kind=list,
                          shape={"type": "array", "items": {"type": "integer", "minimum": 1},
                                 "minItems": 1},
                          doc="stacks: the seeds trained together in one job, as sizes of consecutive stacks "
                              "from seed 1, the last size repeating ([3]: seeds 1-3, 4-6, …; [3, 7]: "
                              "1-3, 4-10, 11-17, …; [1]: one job per seed). Adding a seed in a new "
                              "stack retrains nothing else")
    stack_compute: str = setting("auto", kind=str, choices=STACK_COMPUTE,
                                 doc="how a job's models share the device: batched (one stacked "
                                     "model, batched matrix products), separate (one after the "
                                     "other, each exactly as a job of its own), auto (batched on a "
                                     "GPU, separate on the CPU)")
    cuda_graphs: bool = setting(True, kind=bool,
                                doc="a batched stack on a GPU replays each update as a CUDA graph "
                                    "captured once per shape (model/stack_graph.py; the host no "
                                    "longer dispatches every kernel); no effect on the CPU")
    stack_precision: str = setting("float32", kind=str, choices=STACK_PRECISIONS,
                                   doc="the batched products of a batched stack (input projections, "
                                       "image layer, the GRU recurrence): float32, or bf16 inputs as "
                                       "torch.autocast rounds them (state, gates, losses and Adam stay "
                                       "float32; measured against the seeds' noise in docs/benchmarks.md)")
    stack_compile: bool = setting(False, kind=bool,
                                  doc="a batched stack's GRU elementwise work as torch.compile'd kernels "
                                      "(one per forward step, one for the backward's factor blocks; "
                                      "model/stacked_gru.py); the first update of a process compiles them")
    pinned_memory: bool = setting(False, kind=bool,
                                  doc="a batched stack on a GPU copies each update's batches to the "
                                      "device through pinned host buffers (asynchronous copies); no "
                                      "effect on the CPU, not part of a run's identity")
    tf32: bool = setting(False, kind=bool,
                         doc="let float32 matrix products use TF32 on a GPU (faster; measured against "
                             "the seeds' noise in docs/benchmarks.md)")
    resume_every: int = setting(0, kind=int, low=0,
                                doc="updates between saves of the resumable state last.pt (at the "
                                    "next validation); 0: at every validation")

    # objective smalr (paper 002 §3.2-3.3; model/smalr_objective.py); read by no other objective
    smalr_mask_fraction: float = setting(0.2, kind=float, low=0, high=1, high_open=True,
                                         doc="smalr: share of each sentence's words masked for MCLM "
                                             "(002: 20%)")
    smalr_top_k: int = setting(10, kind=int, low=1,
                               doc="smalr: most violated negatives kept per triplet (002's K is "
                                   "blank in our copy; our choice)")
    smalr_neighbourhood_weight: float = setting(1e-4, kind=float, low=0,
                                                doc="smalr: weight of MULE's neighbourhood constraints "
                                                    "(002 Eq. 4's first weight, 1e-4)")
    smalr_language_weight: float = setting(1e-6, kind=float, low=0,
                                           doc="smalr: weight of the adversarial language classifier "
                                               "(002 Eq. 4's second weight, 1e-6)")
    smalr_mclm_weight: float = setting(5e-2, kind=float, low=0,
                                       doc="smalr: weight of masked cross-language modelling (002 "
                                           "Eq. 4's third weight, 5e-2); 0: no MCLM module (its "
                                           "heads are not built; 002's HEM and LA rows)")
    smalr_masked_positives: bool | None = setting(None, kind=bool, optional=True,
                                                  doc="smalr: Eq. 3 also on the masked captions (one "
                                                      "more positive of their image). null: exactly "
                                                      "when MCLM is on (smalr_mclm_weight > 0; 002 "
                                                      "§3.3, Fig. 2: the masked sentences are "
                                                      "MCLM's, HEM 'does not include MCLM'); true: "
                                                      "always (masking as an augmentation of its "
                                                      "own, the earlier reading); false: never")
    smalr_mclm_detach: bool = setting(True, kind=bool,
                                      doc="smalr: no gradient through MCLM's targets (the unmasked "
                                          "representations; 002 does not say). With a gradient, "
                                          "making every representation alike lowers the loss")
    smalr_language_hidden: int | None = setting(None, kind=int, low=1, optional=True,
                                                doc="smalr: hidden units of the language classifier "
                                                    "(none: one linear layer)")

    def check(self) -> None:
        if self.objective == "smalr" and self.similarity != "cosine":
            raise self.bad("similarity", "objective smalr scores with the cosine (002's triplet "
                                         "losses); use similarity cosine")
        if self.objective not in OBJECTIVES:
            raise self.bad("objective", f"must be one of {OBJECTIVES.names()}")
        if self.similarity not in SIMILARITIES:
            raise self.bad("similarity", f"must be one of {SIMILARITIES.names()}")
        if not (isinstance(self.stack, list) and self.stack
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in self.stack)):
            raise self.bad("stack", "must be a non-empty list of stack sizes >= 1")


@dataclass(frozen=True)
class ModelSettings(Settings):
    """The config's ``model`` section."""

    SECTION = "model"

    embedding_dim: int = setting(kind=int, low=1, doc="word embeddings (paper: 300)")
    joint_dim: int = setting(kind=int, low=1, doc="GRU hidden size = joint space (paper: 1024)")
    image_normalization: str = setting(kind=str, choices=IMAGE_NORMALIZATIONS,
                                       doc="how stored image features enter the affine layer")
    text_encoder: str = setting("gru", kind=str,
                                doc="a registered text encoder: gru (one word-embedding table shared "
                                    "by all languages; papers 000, 001, 003, 004) | hem (paper 002's "
                                    "hybrid embedding: per-language rows for frequent words, a frozen "
                                    "latent assignment for the rest, from the pretrain_hem step)")
    image_layers: int = setting(1, kind=int, choices=(1, 2),
                                doc="fully connected layers of the image branch: 1 (one affine layer; "
                                    "papers 000, 001, 003, 004) or 2 (layer, ReLU, layer: paper 002's "
                                    "Embedding Network)")
    image_hidden: int | None = setting(None, kind=int, low=1, optional=True,
                                       doc="width between the two image layers (null: joint_dim)")
    text_projection: bool = setting(False, kind=bool,
                                    doc="a fully connected layer from the GRU's final state into the "
                                        "joint space (paper 002's Embedding Network)")

    def check(self) -> None:
        if self.text_encoder not in TEXT_ENCODERS:
            raise self.bad("text_encoder", f"must be one of {TEXT_ENCODERS.names()}")
