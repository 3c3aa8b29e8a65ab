"""The ``features`` config section."""

from __future__ import annotations

from dataclasses import dataclass

from pseudopairs.core.settings import Settings, SettingsError, device_setting, setting


@dataclass(frozen=True)
class FeatureSettings(Settings):
    """The ``features`` config section (config/config.yaml)."""

    SECTION = "features"

    weights: str = setting("none", kind=str,
                           doc="none (seeded random) | imagenet (the model's IMAGENET1K_V1, hub cache) | an "
                               "entry of its torchvision weights enum (IMAGENET1K_V2, DEFAULT, …; hub cache) | "
                               "a state dict path")
    arch: str = setting("resnet50", kind=str,
                        doc="any torchvision classification model (paper: resnet50; resnet152, vit_b_16, "
                            "convnext_base, …); the input of its classifier layer is the feature")
    seed: int = setting(0, kind=int, low=0, doc="initialisation seed with weights: none")
    resize: int = setting(128, kind=int, low=16, doc="shorter side before the centre crop (paper: 256)")
    crop: int = setting(112, kind=int, low=16, doc="centre crop (paper: 224)")
    dtype: str = setting("float16", kind=str, choices=("float16", "float32"), doc="stored feature type")
    format: str = setting("npz", kind=str, choices=("npz", "parquet"), doc="feature file format")
    batch_size: int = setting(32, kind=int, low=1, doc="images per forward batch")
    workers: int = setting(1, kind=int, low=0, doc="image decoding processes")
    device: str = device_setting()
    decode: str = setting("cpu", kind=str, choices=("cpu", "device"),
                          doc="where JPEGs are decoded: cpu (PIL, in the decoding processes) or device "
                              "(torchvision.io.decode_jpeg in batches on the features device, then "
                              "resized and cropped there; other formats stay on the CPU)")
    shard_size: int = setting(512, kind=int, low=1, doc="images per resumable shard")
    skip_unreadable: bool = setting(False, kind=bool, doc="skip undecodable images (listed beside the output)")
    threads: int | None = setting(None, kind=int, low=1, optional=True,
                                  doc="torch threads of the forward (null: the cores left after the workers)")

    def check(self) -> None:
        if not self.weights:
            raise self.bad("weights", "must be 'none', 'imagenet', a torchvision weights name or a path "
                                      "to a state dict file")
        if self.crop > self.resize:
            raise self.bad("crop", f"must not exceed features.resize ({self.resize})")
        self._check_backbone()

    def _check_backbone(self) -> None:
        """``arch`` is a torchvision classification model, ``weights`` (when it names torchvision
        weights) an entry of its enum, ``crop`` the input size a fixed-size model (ViT) takes.
        The classic ResNets with ``imagenet`` need no torchvision import (every Snakemake parse
        runs this)."""
        from pseudopairs.features import backbones

        classic = self.arch in backbones.CLASSIC_RESNETS
        try:
            backbones.check_arch(self.arch)
            if backbones.is_enum_weights(self.weights) and not (classic and self.weights == "imagenet"):
                backbones.weights_entry(self.arch, self.weights)
        except backbones.BackboneError as err:
            raise SettingsError(str(err)) from None
        size = None if classic else backbones.fixed_input_size(self.arch)
        if size is not None and self.crop != size:
            raise self.bad("crop", f"{self.arch} takes {size} x {size} inputs only: set features.crop "
                                   f"to {size} (and features.resize to at least {size})")
