"""Scaling curves: time against batch size for every sampler,
time and memory against n for evaluation, and the measured order of growth.

Not a test; nothing here asserts.

* ``samplers`` — forward + backward (loss and its gradient, as
  ``bench_losses.py`` times it, with its batch and its batch-contract columns)
  of every sampler of :data:`tfdml.samplers.SAMPLERS` with the loss of its
  paper (:func:`_pairing`), against the batch size B (m examples per class,
  128-d unit embeddings), as a ``tf.function`` (graph) and with
  ``jit_compile=True`` (XLA). Median of ``--runs`` calls after the first
  call (tracing / compiling, reported apart) and one warm-up call; a point
  whose warm-up call takes long gets fewer calls (at least 3, about
  ``--budget`` seconds in all). Wall time and the process's CPU time (all
  threads) are both recorded: on a shared machine the CPU time is the less
  disturbed measure of the work done. Once a point's median exceeds ``--cap``
  seconds, the larger sizes of that sampler and mode are skipped (printed).
* ``evaluation`` — :func:`tfdml.metrics.retrieval.retrieval_metrics`
  (Recall@{1,10,100,1000}, MAP@R, R-Precision, leave-one-out, euclidean)
  and the distance matrix alone (``bench_eval.py``'s ``matmul``, the floor)
  against n, random 128-d embeddings in round(n / 5.5) classes (the shape of
  SOP). Each (method, n) runs in a fresh process (``bench_eval.run_in_child``):
  the first call is *cold* (tracing, XLA compilation), the median of the
  ``--repeat`` − 1 calls after it *warm* (wall and CPU time); memory is the increase of the
  process's peak RSS over the process before the first call.

The order of growth is the least-squares slope of log(time) against
log(size) over the upper half of the measured sizes (:func:`growth_exponent`).
Each part saves its rows as JSON beside this script and draws its PNG
(``scaling_samplers.png``, ``scaling_eval.png``); ``plot`` redraws both from
the JSON.

Usage::

    python benchmarks/scaling.py                              # both parts, default sizes
    python benchmarks/scaling.py samplers [--sizes 64 128 ...] [--only semi_hard hard] [--modes graph xla] [--keep]
    python benchmarks/scaling.py evaluation [--sizes 10000 20000 50000 100000] [--repeat 3]
    python benchmarks/scaling.py evaluation --sizes 200000 --repeat 1 --keep   # add to the saved points
    python benchmarks/scaling.py plot
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]  # this checkout's tfdml; machine.py, bench_*.py

import numpy as np  # noqa: E402

import bench_eval  # noqa: E402
import timing  # noqa: E402  (benchmarks/timing.py)
import bench_losses  # noqa: E402
import machine  # noqa: E402

BATCH_SIZES = (64, 128, 256, 512, 1024, 2048, 4096)
EVAL_SIZES = (10_000, 20_000, 50_000, 100_000)  # 200_000: run apart (--sizes 200000 --keep)
EXAMPLES_PER_CLASS = 5.5  # SOP: 120,053 images of 22,634 classes (≈ 5.3)
MODES = ("graph", "xla")
EVAL_METHODS = ("tfdml", "matmul")
SAMPLERS_JSON = os.path.join(HERE, "scaling_samplers.json")
EVAL_JSON = os.path.join(HERE, "scaling_eval.json")
SAMPLERS_PNG = os.path.join(HERE, "scaling_samplers.png")
EVAL_PNG = os.path.join(HERE, "scaling_eval.png")

# The loss each sampler is timed with, the pairing of the sampler's paper (the loss
# labels of bench_losses.cases()): builder(sampler, num_classes) -> loss. The "all"
# sampler is passed as an object, so the AllPairsSampler of SAMPLERS is what runs
# (cases() times ContrastiveLoss() with sampler=None, the same pairs without it);
# PrecisionAtKLoss builds its own TopKMisplacedSampler(k).
def _pairing():
    from tfdml import losses

    return {
        "all": ("contrastive (Wu §3)", lambda s, c: losses.ContrastiveLoss(sampler=s)),
        "random": ("contrastive (Wu §3)", lambda s, c: losses.ContrastiveLoss(sampler=s, seed=1)),
        "semi_hard": ("triplet ℓ2² (FaceNet)", lambda s, c: losses.TripletLoss(sampler=s)),
        "random_triplets": ("triplet ℓ2² (FaceNet)", lambda s, c: losses.TripletLoss(sampler=s, seed=1)),
        "hard": ("triplet ℓ2² (FaceNet)", lambda s, c: losses.TripletLoss(sampler=s)),
        "distance_weighted": ("margin (Wu §4)",
                              lambda s, c: losses.MarginLoss(num_classes=c, sampler=s, seed=1)),
        "top_k": ("ℓ_k (Lu Eq. 5)", lambda s, c: losses.PrecisionAtKLoss(k=5)),
        "multi_similarity": ("multi-similarity (Wang 2019)", lambda s, c: losses.MultiSimilarityLoss(sampler=s)),
        "easy_hard": ("triplet ℓ2² (FaceNet)", lambda s, c: losses.TripletLoss(sampler=s)),
        "pair_margin": ("contrastive (Wu §3)", lambda s, c: losses.ContrastiveLoss(sampler=s)),
        "npair": ("triplet ℓ2² (FaceNet)", lambda s, c: losses.TripletLoss(sampler=s)),
        "hdc": ("contrastive (Wu §3)", lambda s, c: losses.ContrastiveLoss(sampler=s)),
    }


# -- order of growth ------------------------------------------------------------
def upper_half(sizes, values):
    """The points of the upper half of the sizes (the larger ⌈len / 2⌉, at least 2)."""
    pairs = sorted(zip(sizes, values))
    keep = max(2, len(pairs) - len(pairs) // 2)
    return pairs[-keep:]


def growth_exponent(sizes, values):
    """(k, c) of values ≈ c·size^k, least squares on log–log over :func:`upper_half`.

    Returns (nan, nan) with fewer than two points.
    """
    pairs = upper_half(sizes, values)
    if len(pairs) < 2:
        return math.nan, math.nan
    x = np.log([p[0] for p in pairs])
    y = np.log([p[1] for p in pairs])
    k, log_c = np.polyfit(x, y, 1)
    return float(k), float(np.exp(log_c))


def _load():
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan


# -- samplers -------------------------------------------------------------------
def sampler_name(loss):
    """The :data:`tfdml.samplers.SAMPLERS` name of ``loss.sampler`` (asked of the object)."""
    from tfdml import samplers

    for name in samplers.SAMPLERS:
        if type(loss.sampler) is type(samplers.get(name)):
            return name
    return None


def sampler_case(name, num_classes):
    """(loss label, loss) timing sampler ``name``; raises ``LookupError`` when there is
    no pairing, ``ValueError`` when the loss built does not run that sampler."""
    from tfdml import samplers

    pairing = _pairing()
    if name not in pairing:
        raise LookupError(f"no loss paired with sampler {name!r}; known: {', '.join(pairing)}")
    label, build = pairing[name]
    loss = build(samplers.get(name), num_classes)
    if sampler_name(loss) != name:
        raise ValueError(f"{label} runs sampler {sampler_name(loss)!r}, not {name!r}")
    return label, loss


def time_point(fn, y, e, runs, budget):
    """(median wall ms, median CPU ms, calls timed, first-call s): one first call
    (tracing / compiling), one warm-up call, then ``runs`` calls, or fewer (at least 3)
    to stay near ``budget`` s. CPU time is the process's, all threads."""

    def call():
        start, cpu = time.perf_counter(), time.process_time()
        timing.materialise(fn(y, e))
        return time.perf_counter() - start, time.process_time() - cpu

    first, _ = call()
    warm, _ = call()
    calls = int(max(3, min(runs, budget // max(warm, 1e-6))))
    wall, cpu = zip(*(call() for _ in range(calls)))
    return 1000.0 * statistics.median(wall), 1000.0 * statistics.median(cpu), calls, first


def measure_samplers(names, sizes, modes=MODES, per_class=4, dim=128, runs=7, cap=2.0, budget=10.0,
                     log=print):
    """Rows {sampler, loss, mode, B, ms, cpu_ms, calls, first_s, load} and skipped points
    {sampler, mode, B, why}, sizes ascending per sampler and mode."""
    import tensorflow as tf

    from tfdml import samplers

    rows, skipped = [], []
    default_per_class = per_class
    for name in names:
        # a sampler whose rule needs a number of examples per class (N-pair: 2) gets batches of it
        per_class = getattr(samplers.get(name), "examples_per_class", None) or default_per_class
        for mode in modes:
            stop = None
            for size in sorted(sizes):
                if stop is not None:
                    skipped.append({"sampler": name, "mode": mode, "B": size, "why": stop})
                    log(f"  {name:17s} {mode:5s} B={size:5d}: skipped ({stop})")
                    continue
                classes = max(2, size // per_class)
                label, loss = sampler_case(name, classes)
                y, e = bench_losses.batch(classes, per_class, dim)
                load = _load()
                try:
                    ms, cpu_ms, calls, first = time_point(bench_losses.step_fn(loss, mode == "xla"), y, e, runs, budget)
                except tf.errors.ResourceExhaustedError as err:
                    stop = f"out of memory at B={size}: {str(err).splitlines()[0][:80]}"
                    skipped.append({"sampler": name, "mode": mode, "B": size, "why": stop})
                    log(f"  {name:17s} {mode:5s} B={size:5d}: skipped ({stop})")
                    continue
                rows.append({"sampler": name, "loss": label, "mode": mode, "B": size, "ms": ms,
                             "cpu_ms": cpu_ms, "calls": calls, "first_s": first, "load": load})
                log(f"  {name:17s} {mode:5s} B={size:5d}: {ms:10.2f} ms, CPU {cpu_ms:10.2f} ms  "
                    f"(medians of {calls}; "
                    f"first call {first:6.2f} s; load {load:.2f})")
                if ms / 1000.0 > cap:
                    stop = f"B={size} took {ms / 1000.0:.3g} s > cap {cap:g} s"
    return rows, skipped


def sampler_exponents(rows, value="ms"):
    """{(sampler, mode): (k, lowest B of the fit, highest B)} for every measured line,
    of the wall time (``value="ms"``) or the CPU time (``"cpu_ms"``)."""
    out = {}
    for key in dict.fromkeys((r["sampler"], r["mode"]) for r in rows):
        line = [r for r in rows if (r["sampler"], r["mode"]) == key]
        sizes, ms = [r["B"] for r in line], [r[value] for r in line]
        k, _ = growth_exponent(sizes, ms)
        fit = upper_half(sizes, ms)
        out[key] = (k, fit[0][0], fit[-1][0])
    return out


def samplers_table(rows, skipped, value="ms"):
    """Markdown: one row per sampler and mode, one column per B (``value``: wall or CPU
    ms), then the exponent of that time."""
    sizes = sorted({r["B"] for r in rows} | {s["B"] for s in skipped})
    exps = sampler_exponents(rows, value)
    lines = ["| sampler + loss | mode | " + " | ".join(f"B={b}" for b in sizes) + " | k (fit range) |",
             "|---|---|" + "---:|" * len(sizes) + "---|"]
    for (name, mode), (k, lo, hi) in exps.items():
        by = {r["B"]: r for r in rows if (r["sampler"], r["mode"]) == (name, mode)}
        label = next(iter(by.values()))["loss"]
        cells = [f"{by[b][value]:.1f}" if b in by else "—" for b in sizes]
        lines.append(f"| {name} + {label} | {'XLA' if mode == 'xla' else 'graph'} | " + " | ".join(cells)
                     + f" | **{k:.2f}** ({lo}–{hi}) |")
    return "\n".join(lines)


# -- evaluation -----------------------------------------------------------------
def eval_classes(n):
    return max(2, round(n / EXAMPLES_PER_CLASS))


def eval_time(row, cpu=False):
    """The warm median when there is one, else the cold call (wall or CPU seconds)."""
    warm, cold = ("warm_cpu_s", "cpu_s") if cpu else ("warm_s", "wall_s")
    return row[warm] if row.get(warm) is not None else row[cold]


def measure_evaluation(sizes, methods=EVAL_METHODS, dim=128, repeat=3, log=print):
    rows = []
    for n in sorted(sizes):
        for method in methods:
            load = _load()
            try:
                row = bench_eval.run_in_child(method, n, classes=eval_classes(n), dim=dim, repeat=repeat)
            except bench_eval.ChildFailed as err:
                log(f"  {method:6s} n={n:7d}: skipped ({err})")
                continue
            row["load"] = load
            row["repeat"] = repeat
            row["increase_mb"] = row["peak_rss_mb"] - row["rss_before_mb"]
            rows.append(row)
            warm = (f"warm {row['warm_s']:8.2f} s (CPU {row['warm_cpu_s']:.2f} s), "
                if row.get("warm_s") is not None else "")
            log(f"  {method:6s} n={n:7d} ({row['classes']} classes): cold {row['wall_s']:8.2f} s, {warm}"
                f"peak RSS {row['peak_rss_mb']:6.0f} MB (+{row['increase_mb']:.0f}); load {load:.2f}")
    return rows


def eval_exponents(rows):
    """{method: (time k, memory-increase k, lowest n of the fit, highest n, CPU-time k)}."""
    out = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        line = [r for r in rows if r["method"] == method]
        ns = [r["n"] for r in line]
        k_time, _ = growth_exponent(ns, [eval_time(r) for r in line])
        k_cpu, _ = growth_exponent(ns, [eval_time(r, cpu=True) for r in line])
        k_mem, _ = growth_exponent(ns, [max(r["increase_mb"], 1e-3) for r in line])
        fit = upper_half(ns, ns)
        out[method] = (k_time, k_mem, fit[0][0], fit[-1][0], k_cpu)
    return out


def eval_table(rows):
    lines = ["| n (classes) | method | cold | warm (calls) | CPU, warm | peak RSS (increase) | load "
             "| warm / floor |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for n in sorted({r["n"] for r in rows}):
        by = {r["method"]: r for r in rows if r["n"] == n}
        floor = by.get("matmul")
        for method, r in by.items():
            warm = f"{r['warm_s']:.2f} s ({r['repeat'] - 1})" if r.get("warm_s") is not None else "—"
            ratio = f"{eval_time(r) / eval_time(floor):.1f}×" if floor else "—"
            name = "distance matrix (floor)" if method == "matmul" else method
            lines.append(f"| {n:,} ({r['classes']:,}) | {name} | {r['wall_s']:.2f} s | {warm} | "
                         f"{eval_time(r, cpu=True):.2f} s | "
                         f"{r['peak_rss_mb']:.0f} MB (+{r['increase_mb']:.0f}) | {r['load']:.1f} | {ratio} |")
    return "\n".join(lines)


# -- saving and plotting --------------------------------------------------------
def sampler_point(row):
    """What a sampler row measures: the rows of a re-run replace the saved ones with this key."""
    return row["sampler"], row["mode"], row["B"]


def save(path, rows, keep=False, key=None, **extra):
    """Write {"runs": [...], "rows": rows} to ``path``; with ``keep``, rows of the file
    whose ``key`` is not among the new rows are kept."""
    runs, old = [], []
    if keep and os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        runs, old = saved["runs"], saved["rows"]
        new_keys = {key(r) for r in rows}
        old = [r for r in old if key(r) not in new_keys]
    runs.append({"command": " ".join(["python", "benchmarks/scaling.py"] + sys.argv[1:]),
                 "machine": machine.describe(), "date": time.strftime("%Y-%m-%d %H:%M"), **extra})
    data = {"runs": runs, "rows": old + rows}
    with open(path, "w") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
    return data


def _title_machine(data):
    loads = [r["load"] for r in data["rows"]]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{machine.cpu_model()}, {cores} cores, load average {min(loads):.1f}–{max(loads):.1f} "
            f"(shared machine)")


def plot_samplers(data, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["rows"]
    exps = sampler_exponents(rows)
    cpu = sampler_exponents(rows, "cpu_ms")
    fig, ax = plt.subplots(figsize=(9, 6.5))
    colours = dict(zip(dict.fromkeys(r["sampler"] for r in rows), plt.cm.tab20.colors))
    for (name, mode), (k, _, _) in exps.items():
        line = sorted((r["B"], r["ms"]) for r in rows if (r["sampler"], r["mode"]) == (name, mode))
        loss = next(r["loss"] for r in rows if r["sampler"] == name)
        ax.plot(*zip(*line), marker="o" if mode == "graph" else "s", markersize=4,
                linestyle="-" if mode == "graph" else "--", color=colours[name],
                label=f"{name} + {loss}, {'graph' if mode == 'graph' else 'XLA'}: B^{k:.2f} "
                      f"(CPU time B^{cpu[name, mode][0]:.2f})")
    sizes = sorted({r["B"] for r in rows})
    lo = min(r["ms"] for r in rows)
    ref = np.array(sizes, float)
    ax.plot(ref, lo * (ref / ref[0]) ** 2, color="0.6", linestyle=":", linewidth=1, label="∝ B² (guide)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [str(b) for b in sizes])
    ax.set_xlabel("batch size B (4 examples per class, 128-d unit embeddings)")
    ax.set_ylabel("forward + backward, median ms")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", ncol=1)
    ax.set_title("Loss + sampler, forward + backward against batch size "
                 "(solid: graph, dashed: XLA; exponent: fit over the upper half)\n"
                 + _title_machine(data), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_eval(data, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["rows"]
    exps = eval_exponents(rows)
    names = {"tfdml": "tfdml retrieval_metrics", "matmul": "distance matrix alone (floor)"}
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 5))
    for method, (k_time, k_mem, _, _, k_cpu) in exps.items():
        line = sorted((r["n"], eval_time(r), r["increase_mb"]) for r in rows if r["method"] == method)
        ns = [p[0] for p in line]
        style = dict(marker="o", linestyle="-" if method == "tfdml" else "--")
        ax_t.plot(ns, [p[1] for p in line],
                  label=f"{names.get(method, method)}: n^{k_time:.2f} (CPU time n^{k_cpu:.2f})", **style)
        ax_m.plot(ns, [p[2] for p in line], label=f"{names.get(method, method)}: n^{k_mem:.2f}", **style)
    ns = np.array(sorted({r["n"] for r in rows}), float)
    t0 = min(eval_time(r) for r in rows if r["n"] == ns[0])
    m0 = min(r["increase_mb"] for r in rows if r["n"] == ns[0])
    ax_t.plot(ns, t0 * (ns / ns[0]) ** 2, color="0.6", linestyle=":", linewidth=1, label="∝ n² (guide)")
    ax_m.plot(ns, max(m0, 1.0) * ns / ns[0], color="0.6", linestyle=":", linewidth=1, label="∝ n (guide)")
    for ax in (ax_t, ax_m):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(ns, [f"{int(n) // 1000}k" for n in ns])
        ax.minorticks_off()
        ax.set_xlabel(f"n (128-d, about n / {EXAMPLES_PER_CLASS:g} classes, leave-one-out)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    ax_t.set_ylabel("seconds (warm median where measured, else cold)")
    ax_t.set_title("time", fontsize=10)
    ax_m.set_ylabel("peak RSS increase over the process before the call, MB", fontsize=8)
    ax_m.set_title("memory", fontsize=10)
    fig.suptitle("Evaluation (Recall@{1,10,100,1000}, MAP@R, R-Precision) against n\n"
                 + _title_machine(data), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- command line ---------------------------------------------------------------
def report_samplers(data):
    skipped = [s for run in data["runs"][-1:] for s in run.get("skipped", [])]
    print("Wall time, median ms:")
    print(samplers_table(data["rows"], skipped))
    print("CPU time of the process (all threads), median ms:")
    print(samplers_table(data["rows"], skipped, "cpu_ms"))
    print("Order of growth (least squares on log–log over the upper half of the measured sizes):")
    cpu = sampler_exponents(data["rows"], "cpu_ms")
    for (name, mode), (k, lo, hi) in sampler_exponents(data["rows"]).items():
        print(f"  {name} {'XLA' if mode == 'xla' else 'graph'}: t ∝ B^{k:.2f}, CPU time ∝ "
              f"B^{cpu[name, mode][0]:.2f}  (B = {lo}–{hi})")


def report_eval(data):
    print(eval_table(data["rows"]))
    print("Order of growth (least squares on log–log over the upper half of the measured sizes):")
    for method, (k_time, k_mem, lo, hi, k_cpu) in eval_exponents(data["rows"]).items():
        print(f"  {method}: time ∝ n^{k_time:.2f}, CPU time ∝ n^{k_cpu:.2f}, memory increase ∝ "
              f"n^{k_mem:.2f}  (n = {lo}–{hi})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="part")
    ps = sub.add_parser("samplers", help="time against batch size for every sampler")
    ps.add_argument("--sizes", type=int, nargs="+", default=list(BATCH_SIZES))
    ps.add_argument("--only", nargs="+", default=None, metavar="SAMPLER", help="these samplers only")
    ps.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ps.add_argument("--per-class", type=int, default=4)
    ps.add_argument("--dim", type=int, default=128)
    ps.add_argument("--runs", type=int, default=7, help="calls timed per point (fewer when slow, at least 3)")
    ps.add_argument("--budget", type=float, default=10.0, help="seconds of timed calls per point, about")
    ps.add_argument("--cap", type=float, default=2.0,
                    help="skip the larger sizes of a sampler and mode once a median exceeds this (s)")
    ps.add_argument("--keep", action="store_true",
                    help="keep the saved points of other samplers, modes and sizes (re-measure a few)")
    pe = sub.add_parser("evaluation", help="time and memory against n for evaluation")
    pe.add_argument("--sizes", type=int, nargs="+", default=list(EVAL_SIZES))
    pe.add_argument("--methods", nargs="+", choices=EVAL_METHODS, default=list(EVAL_METHODS))
    pe.add_argument("--dim", type=int, default=128)
    pe.add_argument("--repeat", type=int, default=3,
                    help="calls per process: the first is cold, the median of the rest warm")
    pe.add_argument("--keep", action="store_true",
                    help="keep the saved points of other sizes and methods (add a size run apart)")
    sub.add_parser("plot", help="redraw both PNGs from the saved JSON")
    args = parser.parse_args(argv)

    print(f"Machine: {machine.describe()}", flush=True)
    if args.part == "plot":
        for path, png, plot, report in ((SAMPLERS_JSON, SAMPLERS_PNG, plot_samplers, report_samplers),
                                        (EVAL_JSON, EVAL_PNG, plot_eval, report_eval)):
            if os.path.exists(path):
                with open(path) as f:
                    data = json.load(f)
                report(data)
                plot(data, png)
                print(f"wrote {os.path.relpath(png)}")
        return 0
    if args.part in (None, "samplers"):
        run_samplers(args if args.part else ps.parse_args([]))
    if args.part in (None, "evaluation"):
        run_evaluation(args if args.part else pe.parse_args([]))
    print(f"Load average at the end: {_load():.2f}")
    return 0


def run_samplers(args):
    from tfdml import samplers

    names = args.only or list(samplers.SAMPLERS)
    print(f"Samplers: forward + backward, B in {sorted(args.sizes)} ({args.per_class} per class), "
          f"{args.dim}-d unit embeddings; median of up to {args.runs} calls (at least 3, about "
          f"{args.budget:g} s) after the first call and one warm-up; cap {args.cap:g} s.", flush=True)
    rows, skipped = measure_samplers(names, args.sizes, args.modes, args.per_class, args.dim,
                                     args.runs, args.cap, args.budget, log=lambda s: print(s, flush=True))
    data = save(SAMPLERS_JSON, rows, keep=args.keep, key=sampler_point, skipped=skipped, load_after=_load())
    report_samplers(data)
    plot_samplers(data, SAMPLERS_PNG)
    print(f"wrote {os.path.relpath(SAMPLERS_JSON)}, {os.path.relpath(SAMPLERS_PNG)}")


def run_evaluation(args):
    print(f"Evaluation: n in {sorted(args.sizes)}, {args.dim}-d, n / {EXAMPLES_PER_CLASS:g} classes; "
          f"{args.repeat} call(s) per fresh process.", flush=True)
    rows = measure_evaluation(args.sizes, args.methods, args.dim, args.repeat,
                              log=lambda s: print(s, flush=True))
    data = save(EVAL_JSON, rows, keep=args.keep, key=lambda r: (r["method"], r["n"]), load_after=_load())
    report_eval(data)
    plot_eval(data, EVAL_PNG)
    print(f"wrote {os.path.relpath(EVAL_JSON)}, {os.path.relpath(EVAL_PNG)}")


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "scaling"))
