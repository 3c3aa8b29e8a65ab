"""The ``pseudopair-stats`` step: the §7.2 statistics of every mined pseudopair set
(:func:`pseudopairs.mining.statistics.pseudopair_statistics`) as results/pseudopair_stats.csv,
and the caption-use and similarity plots."""

from __future__ import annotations

from pseudopairs import commands
from pseudopairs.io import atomic_path
from pseudopairs.mining.statistics import pseudopair_statistics
from pseudopairs.report.plots import caption_use_plot, similarity_histograms


def _cli_pseudopair_stats(args) -> None:
    spec = args.spec
    frame = pseudopair_statistics(spec)
    with atomic_path(args.output) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.4f")
    caption_use_plot(spec, args.plot)
    similarity_histograms(spec, args.histogram)
    print(frame.to_string(index=False))


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "pseudopair-stats", _cli_pseudopair_stats)
    commands.add_json(p, "--spec", "the sets, seeds and their files (experiments.pseudopair_stats_spec)")
    p.add_argument("--output", required=True, help="pseudopair_stats.csv")
    p.add_argument("--plot", required=True, help="caption-use plot (PNG)")
    p.add_argument("--histogram", required=True, help="similarity histograms (PNG)")
