"""Shared test helpers: repository paths and the real Multi30K mirror beside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_MULTI30K = REPO.parent / "shared" / "data" / "multi30k"


def _stand_in_torch_home() -> None:
    """Plans of config/paper.yaml have features jobs that read ResNet50's ImageNet weights from the
    torch hub cache, and a plan whose cache lacks them is refused while the DAG is built (dry runs
    too; pseudopairs.features.contract.missing_weights). Unless TORCH_HOME is set, the tests plan
    with a cache holding an empty file of that name: no test runs those jobs (a test of the
    refusal sets TORCH_HOME itself)."""
    if "TORCH_HOME" in os.environ:
        return
    import atexit
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="pseudopairs-torch-home-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    (home / "hub" / "checkpoints").mkdir(parents=True)
    (home / "hub" / "checkpoints" / "resnet50-0676ba61.pth").write_bytes(b"")
    os.environ["TORCH_HOME"] = str(home)


_stand_in_torch_home()


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def multi30k_root() -> Path:
    if not SHARED_MULTI30K.is_dir():
        pytest.skip(f"real Multi30K text not found at {SHARED_MULTI30K}")
    return SHARED_MULTI30K


def snakemake_exe() -> str:
    exe = Path(sys.executable).with_name("snakemake")
    return str(exe) if exe.exists() else (shutil.which("snakemake") or "snakemake")


def run_snakemake(workdir: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the repository's Snakefile in ``workdir`` (so results/ lands there)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    cmd = [snakemake_exe(), "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def paper_dry_run(tmp_path: Path, *targets: str) -> subprocess.CompletedProcess:
    """``snakemake -n -p`` of ``targets`` on config/paper.yaml with a site file naming an (empty)
    Flickr30K folder, in ``tmp_path``."""
    flickr = tmp_path / "flickr30k"
    flickr.mkdir(exist_ok=True)
    site = tmp_path / "site.yaml"
    site.write_text(f"paper_data: {{flickr30k_images: {flickr}}}\n")
    return run_snakemake(tmp_path, "-n", "-p", "--cores", "8", *targets,
                         "--configfile", str(REPO / "config" / "paper.yaml"), str(site))
