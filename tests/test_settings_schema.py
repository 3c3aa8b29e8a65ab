"""One declaration per setting: the config schema's settings sections are generated from the
settings classes (``x-settings`` nodes, :func:`pseudopairs.core.settings.expand_schema`), every
settings class is a section of the schema, and the generated schema accepts exactly what the
class accepts, field by field (kind, range with its open or closed ends, choices, null, default)."""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import MISSING, fields

import jsonschema
import pytest
import yaml

from conftest import REPO
from pseudopairs.workflow.config import SCHEMA_PATH, load_schema
from pseudopairs.core.settings import SCHEMA_KEY, Settings, SettingsError, check_value, expand_schema

SRC = REPO / "src" / "pseudopairs"


def _x_settings_nodes(node, path=()):
    """(path, node) of every ``x-settings`` node of the raw (unexpanded) schema."""
    if isinstance(node, dict):
        if SCHEMA_KEY in node:
            yield path, node
        for key, value in node.items():
            yield from _x_settings_nodes(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _x_settings_nodes(value, path + (i,))


RAW = yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))
NODES = list(_x_settings_nodes(RAW))


def _target(node):
    module, _, name = node[SCHEMA_KEY].partition(":")
    return getattr(importlib.import_module(module), name)


def _settings_classes() -> list[type[Settings]]:
    """Every settings class of the package (the modules that declare a ``SECTION``)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if not re.search(r"^\s+SECTION = ", path.read_text(encoding="utf-8"), re.M):
            continue
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        module = importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        found += [obj for obj in vars(module).values()
                  if isinstance(obj, type) and issubclass(obj, Settings) and obj is not Settings
                  and obj.__module__ == module.__name__]
    return found


def test_every_settings_class_is_a_section_of_the_schema():
    """A class is generated into the schema itself or through a subclass (``world`` =
    WorldSettings, whose scene keys are SceneSettings'; ``translation.translate`` =
    TranslateSection, TranslateSettings and the job's threads)."""
    classes = _settings_classes()
    assert len(classes) >= 9, classes
    generated = {_target(node) for _, node in NODES if issubclass(_target(node), Settings)}
    # a section generated from a registry names the settings classes it generates (corpora: one per kind)
    generated |= {cls for _, node in NODES for cls in getattr(_target(node), "settings_classes", list)()}
    for cls in classes:
        assert any(issubclass(g, cls) for g in generated), f"{cls.__name__} is not a section of the schema"


def test_the_schema_file_declares_no_setting_itself():
    """An ``x-settings`` node says where its section comes from; the settings' types, ranges and
    defaults are not repeated beside it."""
    assert NODES
    for path, node in NODES:
        assert set(node) <= {SCHEMA_KEY, "x-fill", "x-partial", "default", "description"}, path


def test_a_node_with_properties_beside_its_class_is_refused():
    with pytest.raises(ValueError, match="lists properties too"):
        expand_schema({SCHEMA_KEY: "pseudopairs.model.settings:ModelSettings",
                       "properties": {"joint_dim": {"type": "integer"}}})


def _generated(path):
    node = load_schema()
    for key in path:
        node = node[key]
    return node


def _candidates(meta: dict, default) -> list:
    """Values around every bound and of every kind, to tell open from closed ends."""
    values = [None, True, False, "x", "", [], {}, 0.5, -0.5]
    if meta["choices"] is not None:
        values += list(meta["choices"])
    for bound in (meta["low"], meta["high"]):
        if bound is None:
            continue
        if meta["kind"] is int:
            values += [int(bound) - 1, int(bound), int(bound) + 1]
        else:
            values += [bound, math.nextafter(bound, -math.inf), math.nextafter(bound, math.inf),
                       bound - 1, bound + 1]
    values += [0, 1, -1, 10**6, 1e-9]
    if default is not MISSING:
        values.append(default)
    return values


def _schema_accepts(schema: dict, value) -> bool:
    if meta_int_like_float(schema, value):
        return False
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def meta_int_like_float(schema: dict, value) -> bool:
    """JSON schema counts 2.0 as an integer; the settings count only Python ints (the config's
    YAML gives 2 for 2): leave such values out of the comparison."""
    return isinstance(value, float) and value.is_integer() and "integer" in str(schema.get("type"))


@pytest.mark.parametrize("path, node", NODES, ids=[".".join(map(str, p)) for p, _ in NODES])
def test_each_generated_setting_accepts_what_its_class_accepts(path, node):
    target = _target(node)
    section = _generated(path)
    if not issubclass(target, Settings):  # the criteria's parameters: below
        return
    names = [f.name for f in fields(target)]
    assert list(section["properties"]) == names
    assert section["additionalProperties"] is False
    partial = node.get("x-partial", False)
    required = [f.name for f in fields(target) if f.default is MISSING and f.default_factory is MISSING]
    assert section.get("required", []) == ([] if partial else required)
    fill = node.get("x-fill", False)
    for f in fields(target):
        prop = section["properties"][f.name]
        default = (f.default if f.default is not MISSING
                   else f.default_factory() if f.default_factory is not MISSING else MISSING)
        filled = not partial and (fill is True or f.name in (fill or ()))
        if default is MISSING:
            assert "default" not in prop, f.name
        elif filled:
            assert prop["default"] == default, f.name
        else:
            assert "default" not in prop and "default" in prop.get("description", ""), f.name
        if f.metadata["doc"]:
            assert prop["description"].startswith(f.metadata["doc"]), f.name
        for value in _candidates(f.metadata, default):
            if f.metadata["kind"] in (dict, list) and isinstance(value, (dict, list)):
                continue   # a shape: checked by the schema and the class's check()
            if meta_int_like_float(prop, value):
                continue
            try:
                check_value(value, f.metadata)
                by_class = True
            except SettingsError:
                by_class = False
            assert _schema_accepts(prop, value) == by_class, (f.name, value)


def test_each_criterion_parameter_is_a_setting_of_the_schema():
    """A pseudopair set's ``mining``: the criterion, one of the registry's, and each criterion's
    parameters, accepted by the schema exactly as by the criterion's own check."""
    from pseudopairs.mining import criteria

    (path, _), = [(p, n) for p, n in NODES if n[SCHEMA_KEY].endswith(":CriterionSection")]
    section = _generated(path)
    assert section["properties"]["criterion"]["enum"] == criteria.CRITERIA.names()
    assert criteria.DEFAULT_CRITERION in criteria.CRITERIA
    for name in criteria.CRITERIA.names():
        for param in criteria.CRITERIA.get(name).params:
            prop = section["properties"][param.name]
            for value in _candidates(param.field.metadata, param.default):
                if meta_int_like_float(prop, value) or isinstance(value, (dict, list)):
                    continue
                try:
                    param.check(value)
                    ok = True
                except ValueError:
                    ok = False
                assert _schema_accepts(prop, value) == ok, (name, param.name, value)


def test_the_mining_criterion_default_is_written_once():
    hits = []
    for path in SRC.rglob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.search(r"""criterion["']?\s*[,=:]\s*\(?["']cosine["']|get\(["']criterion["'],\s*["']cosine""", line):
                hits.append(f"{path.relative_to(SRC)}: {line.strip()}")
    assert hits == [], hits


def test_threads_0_reaches_the_evaluate_job_as_torchs_default(monkeypatch, tmp_path):
    """training.threads: 0 ("torch's default") is the train and evaluate rules' threads; the
    evaluate job then leaves torch's thread count as it is (torch refuses 0)."""
    import argparse
    import json

    import torch

    from pseudopairs.evaluation import step

    monkeypatch.setattr(step, "evaluate_checkpoint", lambda **kw: {"sum_sum": 1.0})
    before = torch.get_num_threads()
    job = {"experiment": "en", "device": "cpu", "threads": 0,
           "data": {"captions": "c.parquet", "features": "f.npz", "langs": ["en"],
                    "translation_captions": "t.parquet", "translation_langs": ["en", "de"]},
           "models": {"1": {"checkpoint": "c.pt", "vocab": "v.json", "output": str(tmp_path / "metrics.json")}}}
    step._cli_evaluate(argparse.Namespace(job=job, threads=None))
    assert torch.get_num_threads() == before
    assert json.loads((tmp_path / "metrics.json").read_text())["sum_sum"] == 1.0
