"""Speed of the semi-hard sampler beside its earlier form (not a test; nothing here asserts).

Forward + backward of the ℓ2² triplet loss (``losses.TripletLoss``, margin
0.2) on L2-normalised ``--dim``-d embeddings, ``--per-class`` examples per
class, B = 64 … 1024, with three samplers in the same process:

* before: the sort-only sampler of commit 0ae0a2c (kept below, verbatim, as
  the reference) with that commit's ``tf.gather_nd`` in the loss;
* after: ``samplers.SemiHardSampler`` (the path :func:`tfdml.kernels.semi_hard.plan` picks)
  in ``losses.TripletLoss``;
* hard: ``samplers.HardSampler`` (batch-hard), the yardstick of the issue.

Each runs as a ``tf.function`` with and without ``jit_compile``. Calls are
interleaved (before, after, hard, before, …) so that the load of the shared
machine hits them alike; the table gives the median of ``--runs`` rounds
after ``--warmup`` calls, milliseconds, and the ratios. The selections of
before and after are checked to agree on every valid slot first.

``--crossover`` times the sampler alone, compare path against sort path
(forced through the ``sort_above`` of the CPU table's ``"semi_hard"`` entries,
``tfdml.kernels.CHOICES``), for larger classes, to place those thresholds.
``--profile`` lists the op types that take the most time in one graph-mode call
of the sampler alone (TF step stats, no XLA).

Usage::

    python benchmarks/bench_semi_hard.py [--runs 15] [--warmup 3] [--per-class 4] [--dim 128]
        [--sizes 64,128,256,512,1024] [--crossover] [--profile]
"""

import argparse
import collections
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import machine  # noqa: E402  (benchmarks/machine.py)
import timing  # noqa: E402  (benchmarks/timing.py)

from tfdml import kernels, losses, samplers  # noqa: E402
from tfdml.kernels import semi_hard  # noqa: E402
from tfdml import primitives  # noqa: E402
from tfdml.samplers import base  # noqa: E402


class SortOnlySemiHard(base.Sampler):
    """The earlier semi-hard sampler (commit 0ae0a2c): one stable sort per row."""

    kind = "triplets"
    needs_seed = False

    def __init__(self, fallback="hardest_inside"):
        self.fallback = fallback

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        size = tf.shape(dist)[0]
        pos, neg = base.split_candidates(labels, candidates)
        inf = tf.constant(float("inf"), dist.dtype)
        is_neg = tf.cast(neg, tf.int32)
        num_neg = tf.reduce_sum(is_neg, axis=1)
        dest = tf.where(
            neg,
            tf.cumsum(is_neg, axis=1, exclusive=True),
            num_neg[:, None] + tf.cumsum(1 - is_neg, axis=1, exclusive=True),
        )
        part = primitives.invert_permutation_rows(dest)
        order = primitives.gather_rows(part, tf.argsort(primitives.gather_rows(dist, part), axis=1, stable=True))
        sorted_neg = primitives.gather_rows(neg, order)
        below = tf.cumsum(tf.cast(sorted_neg, tf.int32), axis=1)
        slot = tf.where(sorted_neg, below - 1, size)
        flat_slot = tf.reshape(slot + (tf.range(size) * (size + 1))[:, None], [-1])
        by_rank = tf.math.unsorted_segment_max(tf.reshape(order, [-1]), flat_slot, size * (size + 1))
        by_rank = tf.reshape(by_rank, tf.stack([size, size + 1]))
        first = primitives.gather_rows(below, primitives.invert_permutation_rows(order))
        found = first < num_neg[:, None]
        semi_hard_neg = primitives.gather_rows(by_rank, tf.minimum(first, size - 1))
        hardest_inside = tf.argmax(tf.where(neg, dist, -inf), axis=1, output_type=tf.int32)
        negative = tf.where(found, semi_hard_neg, hardest_inside[:, None])
        if self.fallback == "hardest_inside":
            valid = tf.logical_and(pos, (num_neg > 0)[:, None])
        else:
            valid = tf.logical_and(pos, found)
        rows = tf.range(size, dtype=tf.int32)
        return base.TripletSelection(
            tf.repeat(rows, size), tf.tile(rows, [size]), tf.reshape(negative, [-1]), tf.reshape(valid, [-1])
        )


class GatherNdTripletLoss(losses.TripletLoss):
    """The earlier triplet loss: ``tf.gather_nd`` for D_ap and D_an (same values and
    gradient as today's flat gather, slower gradient in graph mode)."""

    def compute(self, targets, embeddings):
        dist = self.distances(embeddings)
        selection = self.sample(dist, targets, embeddings)
        values = tf.square(dist) if self.squared else dist

        def pairs(rows, cols):
            return tf.gather_nd(values, tf.stack([tf.cast(rows, tf.int32), tf.cast(cols, tf.int32)], axis=1))

        d_ap = pairs(selection.anchor, selection.positive)
        d_an = pairs(selection.anchor, selection.negative)
        return self.reduce(tf.nn.relu(d_ap - d_an + self.margin), tf.cast(selection.mask, dist.dtype))


def batch(size, per_class, dim, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(-(-size // per_class)), per_class)[:size].astype(np.int32)
    e = rng.normal(size=(size, dim)).astype(np.float32)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    return tf.constant(labels), tf.constant(e)


def loss_step(sampler, jit, before=False):
    loss = (GatherNdTripletLoss if before else losses.TripletLoss)(sampler=sampler)

    def step(y, e):
        with tf.GradientTape() as tape:
            tape.watch(e)
            value = loss(y, e)
        return value, tape.gradient(value, e)

    return tf.function(step, jit_compile=jit)


def sampler_call(sampler, jit, sort_above=None):
    """The sampler alone on a distance matrix; ``sort_above`` fixes the path while tracing."""
    def select(d, y):
        return sampler(d, y)

    fn = tf.function(select, jit_compile=jit)
    if sort_above is None:
        return fn
    traced = {}

    def call(d, y):
        if "f" not in traced:
            table = kernels.CHOICES["CPU"]["semi_hard"]
            saved = dict(table)
            for mode, choice in saved.items():
                table[mode] = kernels.Choice(choice.form, {**choice.params, "sort_above": sort_above})
            try:
                traced["f"] = fn.get_concrete_function(d, y)
            finally:
                table.update(saved)
        return traced["f"](d, y)

    return call


def check_same(y, e):
    dist = tf.norm(e[:, None] - e[None], axis=-1)
    for jit in (False, True):
        old, new = (sampler_call(s, jit)(dist, y) for s in (SortOnlySemiHard(), samplers.SemiHardSampler()))
        valid = old.mask.numpy()
        if not (np.array_equal(valid, new.mask.numpy())
                and np.array_equal(old.negative.numpy()[valid], new.negative.numpy()[valid])):
            raise SystemExit("before and after disagree: the comparison would be meaningless")


def table(args):
    print(
        f"Triplet loss ℓ2² forward + backward, {args.per_class} examples per class, {args.dim}-d unit "
        f"embeddings; median of {args.runs} interleaved rounds after {args.warmup} warm-up calls, ms."
    )
    print("| B | mode | path | before | after | hard | before / after | after / hard |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        y, e = batch(size, args.per_class, args.dim)
        check_same(y, e)
        for jit in (False, True):
            branch = int(semi_hard.plan(y, compiled=jit))
            widths = kernels.choose("semi_hard", mode="xla" if jit else "graph").params.get("widths", ())
            path = ("reference" if branch < 0 else "sort" if branch == len(widths)
                    else f"compare K={widths[branch]}")
            fns = [
                loss_step(SortOnlySemiHard(), jit, before=True),
                loss_step(samplers.SemiHardSampler(), jit),
                loss_step(samplers.HardSampler(), jit),
            ]
            before, after, hard = timing.interleaved_ms(fns, (y, e), args.runs, args.warmup)
            print(
                f"| {size} | {'XLA' if jit else 'graph'} | {path} | {before:.2f} | {after:.2f} | {hard:.2f} "
                f"| {before / after:.1f}× | {after / hard:.2f}× |",
                flush=True,
            )
        print(f"<!-- load average after B={size}: {os.getloadavg()[0]:.2f} -->", flush=True)


def crossover(args):
    print(
        "\nSampler alone, compare path vs sort path (forced), B examples in classes of m; "
        f"median of {args.runs} interleaved rounds, ms."
    )
    print("| B | m | P = m − 1 | mode | compare | sort | compare / sort |")
    print("|---:|---:|---:|---|---:|---:|---:|")
    for size in (256, 1024):
        for per_class in (8, 16, 32, 48, 64, 128, 192, 256):
            if per_class >= size:
                continue
            y, e = batch(size, per_class, args.dim)
            dist = tf.norm(e[:, None] - e[None], axis=-1)
            for jit in (False, True):
                fns = [sampler_call(samplers.SemiHardSampler(), jit, s) for s in (10**9, -1)]
                compare, sort = timing.interleaved_ms(fns, (dist, y), args.runs, args.warmup)
                print(
                    f"| {size} | {per_class} | {per_class - 1} | {'XLA' if jit else 'graph'} | {compare:.2f} "
                    f"| {sort:.2f} | {compare / sort:.2f} |",
                    flush=True,
                )


def profile(args):
    """Op types by total time in one graph-mode sampler call (TF step stats)."""
    for size in (256, 1024):
        y, e = batch(size, args.per_class, args.dim)
        dist = tf.norm(e[:, None] - e[None], axis=-1).numpy()
        for name, sampler in (("before", SortOnlySemiHard()), ("after", samplers.SemiHardSampler())):
            graph = tf.Graph()
            with graph.as_default():  # placeholders, so that nothing is folded into constants
                d_in = tf.compat.v1.placeholder(tf.float32, [size, size])
                y_in = tf.compat.v1.placeholder(tf.int32, [size])
                sel = sampler(d_in, y_in)
            feed = {d_in: dist, y_in: y.numpy()}
            totals = collections.Counter()
            with tf.compat.v1.Session(graph=graph) as sess:
                for _ in range(args.warmup):
                    sess.run(sel, feed)
                for _ in range(args.runs):
                    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
                    meta = tf.compat.v1.RunMetadata()
                    sess.run(sel, feed, options=options, run_metadata=meta)
                    for dev in meta.step_stats.dev_stats:
                        for node in dev.node_stats:
                            kind = node.timeline_label.split("(")[0].split("=")[-1].strip() or node.node_name
                            totals[kind] += node.op_end_rel_micros - node.op_start_rel_micros
            total = sum(totals.values())
            top = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in totals.most_common(args.top))
            per_call = total / args.runs / 1000
            print(f"B={size} {name}: {per_call:.2f} ms of op time per call; top: {top}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--per-class", type=int, default=4)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--sizes", default="64,128,256,512,1024")
    parser.add_argument("--crossover", action="store_true", help="compare vs sort path for larger classes")
    parser.add_argument("--profile", action="store_true", help="op types by time, graph mode")
    parser.add_argument("--top", type=int, default=5, help="op types listed by --profile")
    args = parser.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    print(f"Machine: {machine.describe()}")
    if args.profile:
        profile(args)
    elif args.crossover:
        crossover(args)
    else:
        table(args)
    print(f"Load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_semi_hard"))
