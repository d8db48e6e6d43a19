"""Regenerate the README's main-job figures: one command, the user's own command per seed.

    python benchmarks/readme_figures.py                # print the table (seeds 0-4)
    python benchmarks/readme_figures.py --write        # and replace it in README.md
    python benchmarks/readme_figures.py --onednn off   # the same with TF_ENABLE_ONEDNN_OPTS=0

Each seed runs ``train.py --config configs/default.yaml --set seed=S`` in a
subprocess (exactly what a user types, into a temporary ``output_dir``) and
reads the held-out figures of the model and of the raw-pixel baseline from
its ``metrics.json``. The README block between the markers
``<!-- readme_figures:main_job:begin -->`` and ``...:end -->`` is rendered
from those files alone, so the table and the sentence under it cannot drift
apart from what ``train.py`` prints.

What varies across machines: per-seed values depend on the CPU's kernels
(oneDNN on or off, AVX-512 or not change float rounding, and training
amplifies it), so another CPU gives other per-seed figures; the raw-pixel row
does not train and is the same everywhere. ``--onednn off`` reruns the seeds
under the other kernel setting of the same machine, the nearest stand-in for
another CPU; the mean over seeds is the figure to compare.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BEGIN = "<!-- readme_figures:main_job:begin -->"
END = "<!-- readme_figures:main_job:end -->"

#: (column title, metrics.json key) of the README table.
COLUMNS = (("Recall@1", "recall@1"), ("MAP@R", "map@r"), ("R-Precision", "r_precision"),
           ("NMI", "nmi"))


def run_seed(seed, config, onednn=None, python=sys.executable):
    """``{"metrics", "baseline", "seconds"}`` of one ``train.py`` run with ``seed``."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    if onednn is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = "1" if onednn else "0"
    with tempfile.TemporaryDirectory() as out:
        started = time.time()
        proc = subprocess.run(
            [python, os.path.join(ROOT, "train.py"), "--config", config, "--set", f"seed={seed}",
             "--set", f"output_dir={out}", "--quiet"],
            cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"train.py failed for seed {seed} (exit {proc.returncode}):\n"
                             f"{proc.stderr[-2000:]}")
        with open(os.path.join(out, "metrics.json")) as f:
            report = json.load(f)
    if "baseline" not in report:
        raise SystemExit(f"{config} scores no baseline: set evaluation.baseline: raw_pixels.")
    return {"metrics": report["metrics"], "baseline": report["baseline"]["metrics"],
            "seconds": time.time() - started, "num_queries": report["metrics"].get("num_queries")}


def _row(title, values, bold=False):
    cells = [f"{values[key]:.3f}" for _, key in COLUMNS]
    if bold:
        title, cells = f"**{title}**", [f"**{c}**" for c in cells]
    return f"| {title} | " + " | ".join(cells) + " |"


def render(runs, seeds, machine_line=""):
    """The README block (without markers) from the per-seed ``run_seed`` results.

    Every derived figure (mean row, percentages) is computed from the values
    as shown (3 decimals), so a reader can check it from the table.
    """
    shown = [{key: round(r["metrics"][key], 3) for _, key in COLUMNS} for r in runs]
    mean = {key: sum(s[key] for s in shown) / len(shown) for _, key in COLUMNS}
    raw = {key: round(runs[0]["baseline"][key], 3) for _, key in COLUMNS}
    seconds = sum(r["seconds"] for r in runs) / len(runs)
    lines = [
        f"Measured {machine_line}(`python train.py --config configs/default.yaml --set seed=S`, "
        f"S = {seeds[0]}–{seeds[-1]}; about {seconds:.0f} s each), held-out on digits 5–9 "
        f"({runs[0]['num_queries']:,} leave-one-out queries), next to raw pixels (L2-normalised "
        "784-d vectors) on the same queries. Regenerate with "
        "`python benchmarks/readme_figures.py --write`.",
        "",
        "| | " + " | ".join(title for title, _ in COLUMNS) + " |",
        "|---" * (len(COLUMNS) + 1) + "|",
        _row("raw pixels", raw),
    ]
    lines += [_row(f"default config, seed {s}", values) for s, values in zip(seeds, shown)]
    lines.append(_row(f"default config, mean of {len(runs)}", mean, bold=True))
    beats = all(values[key] > raw[key] for values in shown for _, key in COLUMNS)
    errors_removed = 1 - (1 - mean["recall@1"]) / max(1 - raw["recall@1"], 1e-12)
    lines += [
        "",
        ("Every seed beats raw pixels on every figure" if beats else
         "Not every seed beats raw pixels on every figure") +
        f": MAP@R by {100 * (mean['map@r'] / raw['map@r'] - 1):+.0f} % and NMI by "
        f"{100 * (mean['nmi'] / raw['nmi'] - 1):+.0f} % on average. Recall@1 is near its "
        f"ceiling, but the model removes {100 * errors_removed:.0f} % of the errors that raw "
        "pixels make. Per-seed figures vary with the CPU's kernels (another CPU, or "
        "`TF_ENABLE_ONEDNN_OPTS=0`, trains to other per-seed values); the raw-pixel row does "
        "not train and is the same everywhere; compare the mean over seeds.",
    ]
    return "\n".join(lines)


def replace_block(text, block, begin=BEGIN, end=END, document="README.md"):
    """``text`` (of ``document``) with the lines between the markers ``begin`` and ``end``
    replaced by ``block``."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{document} must hold one {begin} ... {end} block.")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{block}\n{end}{tail}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=os.path.join("configs", "default.yaml"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--onednn", choices=("on", "off"), default=None,
                        help="set TF_ENABLE_ONEDNN_OPTS for the runs (default: as the environment)")
    parser.add_argument("--write", action="store_true", help="replace the block in README.md")
    args = parser.parse_args(argv)
    import machine

    print(machine.describe(), flush=True)
    runs = []
    for seed in args.seeds:
        runs.append(run_seed(seed, args.config, None if args.onednn is None else args.onednn == "on"))
        print(f"seed {seed}: " + ", ".join(f"{key} {runs[-1]['metrics'][key]:.4f}"
                                          for _, key in COLUMNS)
              + f" ({runs[-1]['seconds']:.0f} s)", flush=True)
    load = os.getloadavg()[0]
    block = render(runs, args.seeds, f"on the 2-core development machine at load average {load:.1f} ")
    print(block)
    if args.write:
        from tfdml import files

        path = os.path.join(ROOT, "README.md")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        files.write_text(path, replace_block(text, block))
        print(f"Wrote {path}")


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "readme_figures"))
