"""The paper plan's GPU-hours: what its GPU jobs ask SLURM for against what they are estimated to
use, both from one calibration file (pseudopairs.workflow.calibration; docs/cluster.md "GPU-hours").

    .venv/bin/python benchmarks/gpu_hours.py [--calibration config/calibration/h100.yaml]
        [--estimate-with FILE] [--target all]

Runs ``snakemake -n`` of ``config/paper.yaml`` (rule ``all`` by default) with the SLURM profile and a
site file naming an empty Flickr30K folder, the jobs asking for the walltimes the calibration
gives, and sums the GPU jobs: requested GPU-hours (first-attempt walltime × GPUs; a group job's
members add up) and estimated GPU-hours (each job's estimate from the same file, or from
``--estimate-with``: e.g. a site keeping the shipped H100 file on H200s), per job kind and in all.
Not a timing: needs the workflow's environment (Snakemake and the SLURM plugin), no GPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", default=str(REPO / "config" / "calibration" / "h100.yaml"),
                        help="the calibration the jobs ask with (config resources.calibration)")
    parser.add_argument("--estimate-with", default=None,
                        help="estimate with another calibration (default: the same file)")
    parser.add_argument("--target", default="all")
    args = parser.parse_args()

    from pseudopairs.workflow import calibration as cal
    from pseudopairs.workflow.config import check_config, load_config

    with tempfile.TemporaryDirectory(prefix="pp-gpu-hours-") as tmp:
        tmp = Path(tmp)
        (tmp / "flickr30k").mkdir()
        site = tmp / "site.yaml"
        site.write_text(f"paper_data: {{flickr30k_images: {tmp / 'flickr30k'}}}\n"
                        f"resources: {{calibration: {Path(args.calibration).resolve()}}}\n")
        snakemake = Path(sys.executable).with_name("snakemake")
        command = [str(snakemake if snakemake.exists() else "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(tmp),
                   "-n", "--profile", str(REPO / "profiles" / "slurm"), "--cores", "64", "--configfile",
                   str(REPO / "config" / "paper.yaml"), str(site), "--", args.target]
        # the plan checks that the features' ImageNet weights are in the torch hub cache; nothing
        # runs here, so a cache with an empty file of that name stands in
        checkpoints = tmp / "torch" / "hub" / "checkpoints"
        checkpoints.mkdir(parents=True)
        (checkpoints / "resnet50-0676ba61.pth").write_bytes(b"")
        env = {**os.environ, "TORCH_HOME": str(tmp / "torch")}
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            print(result.stderr[-3000:], file=sys.stderr)
            return 1
        config = check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml",
                                          REPO / "config" / "paper.yaml", site))
    asked_with = cal.Calibration.read(args.calibration)
    estimate_with = cal.Calibration.read(args.estimate_with) if args.estimate_with else asked_with
    plan = cal.plan_gpu_hours(cal.dry_run_jobs(result.stdout), estimate_with, config)
    print(f"config/paper.yaml, rule {args.target}: {plan['jobs']} GPU jobs; walltimes from "
          f"{asked_with.gpu_model} ({args.calibration}), estimates from {estimate_with.gpu_model}")
    print(f"{'kind':10s} {'requested GPU-h':>16s} {'estimated GPU-h':>16s} {'ratio':>6s}")
    for kind, hours in plan["by_kind"].items():
        print(f"{kind:10s} {hours['requested']:16.1f} {hours['estimated']:16.1f} "
              f"{hours['requested'] / hours['estimated']:6.2f}")
    print(f"{'all':10s} {plan['requested']:16.1f} {plan['estimated']:16.1f} {plan['ratio']:6.2f}  (goal <= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
