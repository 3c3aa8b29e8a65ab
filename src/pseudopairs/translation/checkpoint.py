"""Reading OpenNMT-py checkpoints."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import pickle
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class _Inert:
    """Stand-in for a class or function a legacy checkpoint pickles by reference (torchtext
    fields and vocabularies, onmt fields, functools.partial tokenisers …). Constructing one, or
    restoring its state, only records data; nothing of the original class is imported or run."""

    _pickled_name = "?"

    def __init__(self, *args, **kwargs) -> None:
        self.__dict__["_args"] = args
        self.__dict__["_kwargs"] = kwargs

    def __setstate__(self, state) -> None:
        if isinstance(state, dict):
            self.__dict__.update(state)
        elif (isinstance(state, tuple) and len(state) == 2
              and all(part is None or isinstance(part, dict) for part in state)):
            for part in state:
                self.__dict__.update(part or {})
        else:
            self.__dict__["_state"] = state

    def __setitem__(self, key, value) -> None:
        self.__dict__.setdefault("_items", {})[key] = value

    def append(self, value) -> None:
        self.__dict__.setdefault("_list", []).append(value)

    def extend(self, values) -> None:
        self.__dict__.setdefault("_list", []).extend(values)

    def __repr__(self) -> str:
        return f"<stand-in for {self._pickled_name}>"


_INERT_CLASSES: dict[str, type] = {}


def _inert_class(module: str, name: str) -> type:
    key = f"{module}.{name}"
    if key not in _INERT_CLASSES:
        _INERT_CLASSES[key] = type(name, (_Inert,), {"_pickled_name": key, "__module__": __name__})
    return _INERT_CLASSES[key]


def _safe_reconstructor(cls, base, state):
    """``copyreg._reconstructor`` restricted to stand-ins (protocol 0/1 pickles of plain objects)."""
    if isinstance(cls, type) and issubclass(cls, _Inert):
        obj = cls.__new__(cls)
        if state is not None:
            obj.__dict__["_base_state"] = state
        return obj
    raise pickle.UnpicklingError(f"refusing to reconstruct {cls!r} from a legacy checkpoint")


@functools.lru_cache(maxsize=1)
def _allowed_globals() -> dict[tuple[str, str], Any]:
    import argparse as _argparse
    import builtins
    import codecs
    import collections

    import torch

    allowed: dict[tuple[str, str], Any] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("collections", "Counter"): collections.Counter,
        ("collections", "defaultdict"): collections.defaultdict,
        ("argparse", "Namespace"): _argparse.Namespace,
        ("_codecs", "encode"): codecs.encode,
        ("copyreg", "_reconstructor"): _safe_reconstructor,
        ("torch", "Size"): torch.Size,
        ("torch", "device"): torch.device,
        ("torch._tensor", "_rebuild_from_type_v2"): torch._tensor._rebuild_from_type_v2,
        ("torch.nn.parameter", "Parameter"): torch.nn.Parameter,
    }
    for name in ("set", "frozenset", "slice", "complex", "bytearray", "bytes", "object", "list",
                 "dict", "tuple", "int", "float", "str", "bool"):
        allowed[("builtins", name)] = getattr(builtins, name)
        allowed[("__builtin__", name)] = getattr(builtins, name)
    return allowed


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickler for legacy OpenNMT-py checkpoints: tensors, containers, ``argparse.Namespace``
    and torch's tensor-rebuilding functions are real; every other global becomes an inert
    stand-in (:class:`_Inert`), so no code of the pickle's choosing can run."""

    stand_ins: set[str] = set()

    def find_class(self, module: str, name: str):
        import torch

        allowed = _allowed_globals()
        if (module, name) in allowed:
            return allowed[(module, name)]
        if module == "torch._utils" and name.startswith("_rebuild_") and hasattr(torch._utils, name):
            return getattr(torch._utils, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        _RestrictedUnpickler.stand_ins.add(f"{module}.{name}")
        return _inert_class(module, name)


def _restricted_load(file, **kwargs):
    return _RestrictedUnpickler(file, **kwargs).load()


#: A "pickle module" for ``torch.load(pickle_module=...)``.
_RESTRICTED_PICKLE = types.ModuleType("pseudopairs_restricted_pickle")


_RESTRICTED_PICKLE.Unpickler = _RestrictedUnpickler


_RESTRICTED_PICKLE.load = _restricted_load


_RESTRICTED_PICKLE.UnpicklingError = pickle.UnpicklingError


@dataclass
class LoadedCheckpoint:
    """An OpenNMT-py checkpoint normalised to the 3.x layout (vocabulary lists)."""

    path: Path
    checkpoint: dict          # model, generator, vocab {"src", "tgt"}, opt
    layout: str               # opennmt-py-3 | opennmt-py-2 | opennmt-py-1
    restricted: bool = False  # read by the restricted unpickler (weights-only loading failed)
    stand_ins: list[str] = field(default_factory=list)

    @property
    def needs_resave(self) -> bool:
        """Whether the converter's own (weights-only) loading would fail on the original file."""
        return self.layout != "opennmt-py-3" or self.restricted


def _plain(value) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _itos(obj, *, path: Path, what: str) -> list[str]:
    itos = getattr(obj, "itos", None)
    if not isinstance(itos, list) or not all(isinstance(t, str) for t in itos):
        raise ValueError(f"{path}: {what} has no list of token strings (itos)")
    return itos


def _field_vocab(field_obj, *, path: Path, side: str) -> list[str]:
    """Vocabulary of an OpenNMT-py 2.x ``TextMultiField`` (or a bare torchtext ``Field``)."""
    subfields = getattr(field_obj, "fields", None)
    if isinstance(subfields, list) and subfields:
        if len(subfields) > 1:
            raise ValueError(f"{path}: the {side} side has {len(subfields) - 1} word feature(s); "
                             "models with source/target features are not supported")
        pair = subfields[0]
        base = pair[1] if isinstance(pair, (tuple, list)) and len(pair) == 2 else pair
        return _itos(getattr(base, "vocab", None), path=path, what=f"the {side} field's vocabulary")
    return _itos(getattr(field_obj, "vocab", None), path=path, what=f"the {side} field")


def _vocab_lists(vocab, *, path: Path) -> tuple[list[str], list[str], str]:
    if isinstance(vocab, dict) and "src" in vocab and "tgt" in vocab:
        src, tgt = vocab["src"], vocab["tgt"]
        if isinstance(src, list) and isinstance(tgt, list):
            if not all(isinstance(t, str) for t in src + tgt):
                raise ValueError(f"{path}: vocabulary lists hold non-string tokens")
            return src, tgt, "opennmt-py-3"
        return (_field_vocab(src, path=path, side="source"), _field_vocab(tgt, path=path, side="target"),
                "opennmt-py-2")
    if isinstance(vocab, list) and all(isinstance(x, (tuple, list)) and len(x) == 2 for x in vocab):
        named = dict(vocab)
        if "src" in named and "tgt" in named:
            return (_itos(named["src"], path=path, what="the source vocabulary"),
                    _itos(named["tgt"], path=path, what="the target vocabulary"), "opennmt-py-1")
    raise ValueError(f"{path}: unrecognised OpenNMT-py vocabulary layout ({type(vocab).__name__})")


def load_checkpoint(path: str | os.PathLike) -> LoadedCheckpoint:
    """Read an OpenNMT-py checkpoint in any of its layouts and return it normalised to the 3.x
    one: ``{"model": state dict, "generator": state dict, "vocab": {"src": [...], "tgt": [...]},
    "opt": Namespace}``.

    First PyTorch's weights-only unpickler (only ``argparse.Namespace`` added) is tried — it reads
    3.x checkpoints and those written by ``train-mt``. If the file pickles other objects (1.x/2.x
    checkpoints pickle torchtext ``Field``/``Vocab`` and onmt ``TextMultiField`` objects), it is
    read by :class:`_RestrictedUnpickler`, which turns those classes into inert stand-ins; the
    token lists are taken from them and the ``opt`` keeps its plain values only.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"OpenNMT-py checkpoint not found: {path}")
    stand_ins: list[str] = []
    restricted = False
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            raw = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError) as first:
        log.info("%s: weights-only loading failed (%s); reading it as a legacy OpenNMT-py "
                 "checkpoint with stand-ins for its pickled classes", path, str(first).splitlines()[0])
        _RestrictedUnpickler.stand_ins = set()
        try:
            raw = torch.load(path, map_location="cpu", weights_only=False,
                             pickle_module=_RESTRICTED_PICKLE)
        except Exception as err:  # noqa: BLE001 — anything here means "not a checkpoint we can read"
            raise ValueError(f"{path}: not a readable PyTorch checkpoint ({type(err).__name__}: {err})") from err
        stand_ins = sorted(_RestrictedUnpickler.stand_ins)
        restricted = True
    except Exception as err:  # noqa: BLE001 — truncated/garbage files raise many types
        raise ValueError(f"{path}: not a readable PyTorch checkpoint ({type(err).__name__}: {err})") from err

    if not isinstance(raw, dict):
        raise ValueError(f"{path}: not an OpenNMT-py checkpoint (a {type(raw).__name__}, not a dict)")
    missing = [key for key in ("model", "generator", "vocab", "opt") if key not in raw]
    if missing:
        raise ValueError(f"{path}: not an OpenNMT-py checkpoint (missing key(s) {missing})")
    opt = raw["opt"]
    if not isinstance(opt, argparse.Namespace):
        raise ValueError(f"{path}: 'opt' is a {type(opt).__name__}, not an argparse.Namespace")
    for key in ("model", "generator"):
        part = raw[key]
        if not isinstance(part, dict) or not all(isinstance(v, torch.Tensor) for v in part.values()):
            raise ValueError(f"{path}: '{key}' is not a state dict (a mapping of names to tensors)")
    src, tgt, layout = _vocab_lists(raw["vocab"], path=path)
    plain_opt = argparse.Namespace(**{k: v for k, v in vars(opt).items() if _plain(v)})
    dropped = sorted(set(vars(opt)) - set(vars(plain_opt)))
    if dropped:
        log.info("%s: opt fields without plain values left out of the re-saved checkpoint: %s",
                 path, ", ".join(dropped))
    checkpoint = {"model": dict(raw["model"]), "generator": dict(raw["generator"]),
                  "vocab": {"src": list(src), "tgt": list(tgt)}, "opt": plain_opt}
    return LoadedCheckpoint(path=path, checkpoint=checkpoint, layout=layout, restricted=restricted,
                            stand_ins=stand_ins)
