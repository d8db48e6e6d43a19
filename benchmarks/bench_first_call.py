"""First call of every loss + sampler: trace, compile and the first forward + backward, each in a fresh process.

    python benchmarks/bench_first_call.py                                  # every pair, B = 256 and 1024, graph + xla
    python benchmarks/bench_first_call.py --batch 256 --runs 5
    python benchmarks/bench_first_call.py --losses margin triplet --samplers distance_weighted by_loss
    python benchmarks/bench_first_call.py --modes graph xla loss
    python benchmarks/bench_first_call.py --losses triplet --samplers semi_hard --reference semi_hard

The cells: every loss of ``tfdml.losses.LOSSES`` with each sampler a config may
give it (``tfdml_app.loss_config.valid_samplers``: the registered samplers whose
kind the loss accepts, and ``by_loss`` where the loss runs without one; a pair
the config then refuses to build is listed below the table),
each built as a config builds it (``loss_config.build_loss``, the
loss's default options, ``num_classes`` = B / m), at each B of ``--batch`` and
in each mode of ``--modes``: ``graph`` (``tf.function``), ``xla``
(``jit_compile=True``), ``loss`` (``EmbeddingModel.compile(jit_compile="loss")``'s
compiled loss), the step of ``bench_losses.step_fn`` on ``bench_losses.batch``
(B × ``--dim`` unit embeddings, m = ``--per-class``).

Each measurement is a fresh Python process (this script with ``--child``), so
nothing is cached from an earlier call: it imports TensorFlow and tfdml
("imports"), builds the loss, its step and the batch, then times the first call
of the step until its results are on the host ("first call": tracing, XLA
compilation where the mode compiles, the first forward + backward) and a second
call ("warm call"); "first call CPU" is the first call's CPU time (both cores'
work, less changed by other processes than the wall time). "process" is the wall time
of the whole child as this process sees it (interpreter start included).
``--reference KERNEL ...`` traces those kernels of ``tfdml.kernels``' table on
their plain reference path (``kernels.forced``), the others as the table says:
what a kernel's fast form costs at the first call, against what it saves warm. A row gives the medians over
``--runs`` processes; the processes of one loss + sampler run in rounds (every
B and mode once per round, in turn), so a change of the machine's load hits its
cells alike. A child that fails gives its last error line in the row.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]  # this checkout's tfdml and tfdml_app, not installed ones; the scripts beside this one
MODES = ("graph", "xla", "loss")


def cells(losses=None, samplers=None):
    """[(loss, sampler)] of every registered loss (or those of ``losses``) with each sampler a config
    accepts for it (or those of ``samplers`` among them), ``by_loss`` included."""
    from tfdml import losses as losses_lib
    from tfdml_app import loss_config

    names = list(losses_lib.LOSSES) if losses is None else list(losses)
    unknown = [n for n in names if n not in losses_lib.LOSSES]
    if unknown:
        raise SystemExit(f"--losses: unknown {', '.join(unknown)}; registered: {', '.join(losses_lib.LOSSES)}.")
    out = []
    for name in names:
        valid = loss_config.valid_samplers(name)
        out += [(name, s) for s in valid if samplers is None or s in samplers]
    if not out:
        raise SystemExit("No loss + sampler pair fits --losses and --samplers; valid samplers per loss: "
                         + "; ".join(f"{n}: {', '.join(loss_config.valid_samplers(n))}" for n in names) + ".")
    return out


def build(loss, sampler, num_classes, dim, seed=0):
    """The loss of a config with ``loss.name = loss`` and ``loss.sampler = sampler``, default options."""
    from tfdml_app import loss_config

    # A cascade of two levels (dim / 2 each) for a loss that scores a cascade's levels (hdc).
    cfg = {"loss": {"name": loss, "sampler": sampler, "sampler_options": {}, "options": {}},
           "seed": seed, "model": {"embedding_dim": dim, "projection_head": None, "cascade": {"levels": 2}}}
    return loss_config.build_loss(cfg, num_classes)


def child(loss, sampler, mode, batch, per_class, dim, reference=()):
    """One cell in this (fresh) process: seconds of the imports, the first and a second call
    (the kernels of ``reference`` on their reference path)."""
    start = time.perf_counter()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import bench_losses  # noqa: F401  (imports TensorFlow and tfdml)
    import timing
    from tfdml import kernels, models
    from tfdml_app import loss_config  # noqa: F401

    imported = time.perf_counter()
    jit = {"graph": False, "xla": True, "loss": models.LOSS_ONLY}[mode]
    classes = batch // per_class
    step = bench_losses.step_fn(build(loss, sampler, classes, dim), jit)
    y, e = bench_losses.batch(classes, per_class, dim)
    times, cpu = [], []
    with kernels.forced(kernels.REFERENCE, kernels=reference) if reference else contextlib.nullcontext():
        for _ in range(2):
            t, c = time.perf_counter(), time.process_time()
            timing.materialise(step(y, e))
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    return {"imports_s": imported - start, "first_s": times[0], "first_cpu_s": cpu[0], "warm_s": times[1]}


def refused(pairs, dim=8):
    """{(loss, sampler): the config's error} for the pairs of ``pairs`` that ``build`` refuses
    (a sampler whose kind fits but whose other needs the loss does not meet, e.g. its distance)."""
    from tfdml_app import loss_config

    out = {}
    for loss, sampler in pairs:
        try:
            build(loss, sampler, num_classes=4, dim=dim)
        except loss_config.ConfigError as err:
            out[loss, sampler] = str(err).split(";")[0]
    return out


def run_child(loss, sampler, mode, batch, per_class, dim, reference=()):
    """:func:`child` in a fresh process: its answer and ``process_s``, or ``{"error": last line}``."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", loss, sampler, mode, str(batch),
           "--per-class", str(per_class), "--dim", str(dim)]
    if reference:
        cmd += ["--reference", *reference]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), process_s=seconds)


def medians(answers):
    """The row of one cell from its children's answers: medians, or the first error."""
    errors = [a["error"] for a in answers if "error" in a]
    if errors:
        return {"error": errors[0]}
    return {key: statistics.median(a[key] for a in answers)
            for key in ("first_s", "first_cpu_s", "warm_s", "imports_s", "process_s")}


def row(loss, sampler, mode, batch, result):
    if "error" in result:
        return f"| {loss} | {sampler} | {mode} | {batch} | failed: {result['error'][:200]} | | | | |"
    return (f"| {loss} | {sampler} | {mode} | {batch} | {result['first_s']:.2f} | {result['first_cpu_s']:.2f} "
            f"| {1000 * result['warm_s']:.2f} | {result['imports_s']:.2f} | {result['process_s']:.2f} |")


def arguments(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--losses", nargs="+", metavar="LOSS", help="registered loss names (default: all)")
    p.add_argument("--samplers", nargs="+", metavar="SAMPLER",
                   help="only these loss.sampler names, 'by_loss' included (default: every one that fits)")
    p.add_argument("--batch", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--modes", nargs="+", default=["graph", "xla"], choices=MODES)
    p.add_argument("--runs", type=int, default=3, help="fresh processes per cell (their median)")
    p.add_argument("--per-class", type=int, default=4, help="m, examples per class in the batch")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--reference", nargs="+", metavar="KERNEL", default=[],
                   help="kernels of tfdml.kernels' table traced on their reference path (default: none)")
    p.add_argument("--child", nargs=4, metavar=("LOSS", "SAMPLER", "MODE", "B"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    batches = [int(args.child[3])] if args.child else args.batch  # a child checks its own B only
    bad = [b for b in batches if b < 2 * args.per_class or b % args.per_class]
    if bad:
        p.error(f"--batch {' '.join(map(str, bad))}: B must be a multiple of --per-class {args.per_class} "
                "with at least two classes.")
    if args.runs < 1:
        p.error("--runs must be >= 1.")
    from tfdml import kernels

    try:
        kernels.check_kernel_names(args.reference)
    except ValueError as err:
        p.error(f"--reference: {err}")
    return args


def main(argv=None):
    args = arguments(argv)
    if args.child:
        loss, sampler, mode, batch = args.child
        print(json.dumps(child(loss, sampler, mode, int(batch), args.per_class, args.dim, tuple(args.reference))))
        return 0
    pairs = cells(args.losses, args.samplers)
    not_built = refused(pairs)
    pairs = [pair for pair in pairs if pair not in not_built]
    import machine

    print(f"Machine: {machine.describe()}")
    print(f"First call of loss + sampler, forward + backward on B × {args.dim} unit embeddings (m = "
          f"{args.per_class}), each in a fresh process; median of {args.runs} processes per cell, seconds "
          "(warm call: ms). imports: TensorFlow + tfdml; process: the child's whole wall time."
          + (f" Kernels on their reference path: {', '.join(args.reference)}." if args.reference else "") + "\n")
    print("| loss | sampler | mode | B | first call s | first call CPU s | warm call ms | imports s | process s |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    results = {}
    for loss, sampler in pairs:
        group = [(mode, batch) for batch in args.batch for mode in args.modes]
        answers = {cell: [] for cell in group}
        for _ in range(args.runs):
            for mode, batch in group:
                answers[mode, batch].append(run_child(loss, sampler, mode, batch, args.per_class, args.dim,
                                                      args.reference))
        for mode, batch in group:
            results[loss, sampler, mode, batch] = medians(answers[mode, batch])
            print(row(loss, sampler, mode, batch, results[loss, sampler, mode, batch]), flush=True)
    for (loss, sampler), why in not_built.items():
        print(f"\nNot run: {loss} + {sampler}: the config refuses it: {why}.")
    return results


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_first_call"))
