"""Re-score a claim's finished runs on a harder view of the kanji set (investigations).

    python study/probe_reproduction.py --claim lu_topk --test-classes 2000 --ks 1 5 10 20

A claim that is not reproduced may fail because the benchmark is too easy:
on the standard view (500 test classes) raw pixels already reach R@1 93 %
and P@5 84 %, and a metric near its ceiling compresses differences. This
script tests that cause without training anything: it takes the model each
finished (arm, seed) left in its run folder (``arms/<arm>/seed-<s>/model.keras``,
kept on the machine that trained it, not committed) and scores it on a view
with more test classes (more distractors per query), at more k, with the
user's own evaluation (``tfdml_app.evaluation.run``). It then judges the
checks of the claims the experiment tests with the verdict function
(``verdicts.judge``: paired by seed, Holm across a claim's checks) on every
metric.

The test classes of a larger view start with those of the standard one
(both take the first classes in the same sha256 order), and the training
classes are the same, so only the number of distractors changes.

Results: ``<out>/probes/<claim>-test<N>.json`` (per run and per metric, with
the ``finished`` time of each result scored, written atomically) and a
markdown table on stdout. Runs whose model is missing are listed and skipped.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]

import reproduce  # noqa: E402  (study/reproduce.py)
from tfdml import files  # noqa: E402


def metric_names(ks):
    """The metrics scored: Recall@1, Precision@k for every k, MAP@R."""
    return ["recall@1"] + [f"precision@{k}" for k in ks] + ["map@r"]


def probe(claim, out, data_dir, budget, test_classes, ks, batch_size=1024):
    """The claim's finished runs on the larger view: ``({arm: {seed: {metric: value}}}, the runs
    skipped, {arm: {seed: the scored result's finished time}})`` (what ties the scores to the
    runs: :func:`reproduce.stale_probes` compares it with the results as they are now)."""
    evaluate = reproduce.evaluate_cli()
    view = reproduce.make_view(data_dir, out, budget["train_classes"], test_classes)
    split = reproduce.view_test_split(view)
    print(f"view {os.path.basename(view)}: {split.num_classes} test classes, {split.num_examples} images",
          flush=True)
    scores, missing, runs = {}, [], {}
    for arm in reproduce.claim_arms(claim):
        if reproduce.ARMS[arm].get(reproduce.VIEW_KEY):
            missing.append(f"{arm} (trained on a view of its own)")
            continue
        for result in reproduce.load_results(out, arm):
            seed = result["seed"]
            model = os.path.join(out, "arms", arm, f"seed-{seed}", "model.keras")
            if not os.path.exists(model):
                missing.append(f"{arm} seed {seed}")
                continue
            run_out = os.path.join(out, "probes", f"test{test_classes}", arm, f"seed-{seed}")
            values = evaluate.run(model, split, run_out, evaluate.Options(
                metrics=("recall", "precision", "map@r"), ks=tuple(sorted({1, *ks})), batch_size=batch_size,
                plots=False, grid=(0, 0)), verbose=0).metrics
            scores.setdefault(arm, {})[str(seed)] = {m: float(values[m]) for m in metric_names(ks)}
            runs.setdefault(arm, {})[str(seed)] = result.get("finished")
            print(f"  {arm} seed {seed}: " + ", ".join(f"{m} {values[m]:.4f}" for m in metric_names(ks)),
                  flush=True)
    return scores, missing, runs


def table(claim, scores, ks):
    """Markdown: each arm's mean ± std, then the claim's checks on every metric."""
    names = metric_names(ks)
    lines = ["| arm | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for arm, seeds in scores.items():
        cells = [reproduce._fmt(*reproduce.summarise([s[m] for s in seeds.values()])) for m in names]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += ["", "| claim: check | " + " | ".join(f"Δ {m} ± SE (paired)" for m in names) + " |",
              "|---|" + "---|" * len(names)]
    cells = {}
    for row in reproduce.paper_claims.rows_of(claim):  # the verdict function, metric by metric
        for metric in names:
            judged, _ = reproduce.verdicts.judge([
                {"better": {int(s): v[metric] for s, v in scores.get(better, {}).items()},
                 "worse": {int(s): v[metric] for s, v in scores.get(worse, {}).items()}}
                for better, worse in row["checks"]])
            for (better, worse), checked in zip(row["checks"], judged):
                diff = "–" if checked["diff"] is None else (
                    f"{100 * checked['diff']:+.1f}" + ("" if checked["se"] is None else f" ± {100 * checked['se']:.1f}"))
                cells.setdefault((row["id"], better, worse), []).append(f"{diff} {checked['outcome']}")
    for (claim_id, better, worse), row_cells in cells.items():
        lines.append(f"| {claim_id}: {better} > {worse} | " + " | ".join(row_cells) + " |")
    return "\n".join(lines)


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--claim", required=True, choices=sorted(reproduce.CLAIMS))
    p.add_argument("--budget", choices=sorted(reproduce.BUDGETS), default="standard",
                   help="the budget whose finished runs are re-scored")
    p.add_argument("--test-classes", type=int, default=2000, help="test classes of the larger view")
    p.add_argument("--ks", type=int, nargs="+", default=[1, 5, 10, 20], help="k of Precision@k")
    reproduce.add_probe_arguments(p)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    budget = reproduce.BUDGETS[args.budget]
    if args.test_classes <= budget["test_classes"]:
        build_parser().error(f"--test-classes must exceed the budget's {budget['test_classes']} "
                             "(the probe asks whether a harder view changes the verdict)")
    out, data_dir = reproduce.probe_folders(args)
    scores, missing, runs = probe(args.claim, out, data_dir, budget, args.test_classes, args.ks)
    for name in missing:
        print(f"skipped: {name} (no model.keras in its run folder: it was trained elsewhere)")
    if not scores:
        sys.exit("No finished run of this claim has its model here; nothing to re-score.")
    path = os.path.join(out, "probes", f"{args.claim}-test{args.test_classes}.json")
    files.write_json(path, {"claim": args.claim, "test_classes": args.test_classes, "ks": args.ks,
                            "scores": scores, reproduce.PROBE_RUNS_KEY: runs}, indent=1)
    print(f"\nFigures in %, mean ± sample std over seeds; wrote {path}\n")
    print(table(args.claim, scores, args.ks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
