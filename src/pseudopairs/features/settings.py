"""The ``features`` config section."""

from __future__ import annotations

from dataclasses import dataclass

from pseudopairs.settings import Settings, device_setting, setting


@dataclass(frozen=True)
class FeatureSettings(Settings):
    """The ``features`` config section (config/config.yaml)."""

    SECTION = "features"

    weights: str = setting("none", kind=str, doc="none (seeded random) | imagenet (hub cache) | a state dict path")
    arch: str = setting("resnet50", kind=str, choices=("resnet18", "resnet34", "resnet50", "resnet101"),
                        doc="torchvision ResNet (paper: resnet50); its average-pool size is the feature size")
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
            raise self.bad("weights", "must be 'none', 'imagenet' or a path to a state dict file")
        if self.crop > self.resize:
            raise self.bad("crop", f"must not exceed features.resize ({self.resize})")
