"""Before/after comparison of a benchmark script, interleaved (not a test).

The machine is shared, so two commits are compared by running the same
benchmark script alternately against each: round 1 before, round 1 after,
round 2 before, ... Each run prints a Markdown table; a row is named by its
text cells and its numeric cells are the figures. For every row and column the
script prints the median over the rounds of each side and the ratio
after / before.

The benchmark script is always taken from the working tree (so both sides
are measured by the same code); only ``tfdml`` changes, imported from a clean
export of ``--before`` (``git archive``) or from the working tree. The
scripts put their own checkout first on ``sys.path``, so the working tree's
``benchmarks/*.py`` are copied into each export's ``benchmarks/`` and run
from there: each side imports the ``tfdml`` beside the script it runs.

Usage::

    python benchmarks/ab_compare.py --before 2d163af [--after HEAD] --rounds 3 -- bench_losses.py --runs 30
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NUMBER = re.compile(r"^-?\d+(\.\d+)?×?$")  # a figure, or a ratio such as "1.73×"


def export_revision(revision, into):
    """Write the files of ``revision`` into the folder ``into``."""
    archive = subprocess.run(["git", "-C", ROOT, "archive", revision], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)


def prepare_tree(tree):
    """Put the working tree's benchmark scripts into an exported ``tree``."""
    into = os.path.join(tree, "benchmarks")
    os.makedirs(into, exist_ok=True)
    for name in os.listdir(HERE):
        if name.endswith(".py"):
            shutil.copyfile(os.path.join(HERE, name), os.path.join(into, name))


def script_path(tree, script):
    """The copy of ``script`` whose checkout (its parent's parent) is ``tree``."""
    return os.path.join(tree, "benchmarks", script)


def table_rows(text):
    """{row name: [figures]} of every Markdown table row that ends in numeric cells.

    The name is every cell up to the last one that is not a number (so a leading batch
    size is part of it); the figures are the numbers after it. A name seen again in the
    same text (rows told apart only by a figure, such as a batch size printed after the
    text cells) gets " #2", " #3", ...: the scripts print their rows in the same order on
    every run, so the n-th such row of each run is the same measurement."""
    rows = {}
    seen = {}
    for line in text.splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        split = len(cells)
        while split > 0 and NUMBER.match(cells[split - 1]):
            split -= 1
        if split == len(cells):
            continue
        figures = [float(c.rstrip("×")) for c in cells[split:]]
        name = " | ".join(cells[:split])
        seen[name] = seen.get(name, 0) + 1
        rows[name if seen[name] == 1 else f"{name} #{seen[name]}"] = figures
    return rows


def run(tree, script, script_args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, os.path.join(tree, "benchmarks")]), TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, script_path(tree, script), *script_args],
        env=env, capture_output=True, text=True, cwd=tree,
    )
    if done.returncode != 0:
        sys.exit(f"{script} failed on {tree}:\n{done.stderr[-2000:]}")
    return done.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="git revision measured as 'before'")
    parser.add_argument("--after", help="git revision measured as 'after' (default: the working tree)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("script", help="benchmark script in benchmarks/, e.g. bench_losses.py")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    script_args = [a for a in args.script_args if a != "--"]

    with tempfile.TemporaryDirectory(prefix="tfdml-ab-") as trees:
        before_tree = os.path.join(trees, "before")
        os.makedirs(before_tree)
        export_revision(args.before, before_tree)
        prepare_tree(before_tree)
        after_tree = ROOT
        if args.after:
            after_tree = os.path.join(trees, "after")
            os.makedirs(after_tree)
            export_revision(args.after, after_tree)
            prepare_tree(after_tree)
        results = {"before": [], "after": []}
        loads = []
        for round_ in range(args.rounds):
            for side, tree in (("before", before_tree), ("after", after_tree)):
                loads.append(os.getloadavg()[0])
                out = run(tree, args.script, script_args)
                results[side].append(table_rows(out))
                if round_ == 0 and side == "before":
                    print(next((l for l in out.splitlines() if l.startswith("Machine:")), ""))
                print(f"round {round_ + 1} {side} done (load average {loads[-1]:.2f})", file=sys.stderr)
            if round_ + 1 < args.rounds:  # a run cut short keeps the table of the rounds done
                print(f"after round {round_ + 1}:", file=sys.stderr)
                print(summary(args, script_args, results, loads), file=sys.stderr, flush=True)
    print(summary(args, script_args, results, loads))


def summary(args, script_args, results, loads):
    """The table of medians over the rounds done so far, and the largest ratio."""
    lines = [f"{args.script} {' '.join(script_args)}: before = {args.before}, "
             f"after = {args.after or 'working tree'}; median of {len(results['after'])} interleaved "
             f"rounds; load average {min(loads):.2f}–{max(loads):.2f}",
             "| row | before | after | after / before |", "|---|---:|---:|---:|"]
    worst = 0.0
    for name, first in results["after"][0].items():
        for column in range(len(first)):
            def median(side):
                values = [r[name][column] for r in results[side] if name in r and len(r[name]) > column]
                return statistics.median(values) if values else None
            before, after = median("before"), median("after")
            if before is None or after is None or before == 0:
                continue
            ratio = after / before
            worst = max(worst, ratio)
            lines.append(f"| {name} [{column + 1}] | {before:.2f} | {after:.2f} | {ratio:.2f} |")
    lines.append(f"largest after / before: {worst:.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
