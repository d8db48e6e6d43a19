"""Accuracy and speed of the pairwise euclidean distance matrix (not a test).

``tfdml.distances.pairwise_euclidean`` expands ``D_ij² = |u_i|² + |v_j|² - 2 u_i·v_j``
around the batch mean (Wu et al. 2017 §3, D_ij). This script compares it with

* **old**: the same expansion around the origin (tfdml's earlier form);
* **centred only**: around the batch mean, without the float64 refinement of
  the entries whose error bound is large (an intermediate form);
* two alternatives that were measured and not adopted, both also accurate for
  close pairs far from the batch mean: **+ exact 8-NN** (the centred
  expansion, then each row's 8 nearest entries recomputed from explicit
  differences) and **float64** (the centred expansion as a float64 matmul,
  always).

Speed is measured on random unit vectors (no close pair: the refinement's
``tf.cond`` skips the float64 matmul) and on the same batch with one
near-duplicate pair (the float64 matmul runs).

Accuracy: B = 64 float32 unit vectors, largest relative error of ``D_ij`` over
all pairs i ≠ j and of the gradient of ``sum D_ij`` (row-wise norm), against
float64 NumPy. Speed: median wall time of ``--runs`` calls after ``--warmup``,
``tf.function`` with and without ``jit_compile``, of the [B, B] matrix alone
(forward) and with the gradient of its sum (forward + backward). The variants
are timed in turn, one call each per round, so that a change in the machine's
load during the run affects them alike.

Usage::

    python benchmarks/bench_distances.py [--runs 15] [--warmup 3] [--sizes 256 1024] [--dim 128]
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import machine  # noqa: E402  (benchmarks/machine.py)
import timing  # noqa: E402  (benchmarks/timing.py)

from tfdml import distances  # noqa: E402


def _expansion(u, v):
    sq_u = tf.reduce_sum(tf.square(u), axis=-1)
    sq_v = tf.reduce_sum(tf.square(v), axis=-1)
    d2 = tf.maximum(sq_u[:, None] + sq_v[None, :] - 2.0 * tf.matmul(u, v, transpose_b=True), 0.0)
    return tf.linalg.set_diag(d2, tf.zeros_like(sq_u))


def old(a):
    """The expansion around the origin, as tfdml computed it before."""
    return distances.safe_sqrt(_expansion(a, a))


def centred_only(a):
    """Around the batch mean, float32 only (no refinement of close pairs)."""
    d2 = distances._expansion(a, a, distances._centre(a), True)[0]
    return distances.safe_sqrt(tf.linalg.set_diag(d2, tf.zeros_like(d2[0])))


def float64(a):
    a64 = tf.cast(a, tf.float64)
    u = a64 - tf.stop_gradient(tf.reduce_mean(a64, axis=0))
    return tf.cast(distances.safe_sqrt(_expansion(u, u)), a.dtype)


def exact_nearest(a, k=8):
    d2 = distances.pairwise_squared_euclidean(a)
    n = tf.shape(a)[0]
    far = tf.linalg.set_diag(tf.stop_gradient(d2), tf.fill([n], tf.constant(np.inf, a.dtype)))
    _, idx = tf.math.top_k(-far, k=k)
    exact = tf.reduce_sum(tf.square(a[:, None, :] - tf.gather(a, idx)), axis=-1)
    where = tf.stack([tf.broadcast_to(tf.range(n)[:, None], tf.shape(idx)), idx], axis=-1)
    values = tf.scatter_nd(where, exact, tf.shape(d2))
    chosen = tf.scatter_nd(where, tf.ones_like(exact), tf.shape(d2)) > 0
    d2 = tf.where(chosen, values, tf.where(tf.transpose(chosen), tf.transpose(values), d2))
    return distances.safe_sqrt(d2)


VARIANTS = {
    "old (around the origin)": old,
    "centred only": centred_only,
    "new (centred + float64 where needed)": distances.pairwise_euclidean,
    "alternative: + exact 8-NN": exact_nearest,
    "alternative: float64": float64,
}


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def batches(dim, rng, size=64):
    """(name, float32 [size, dim] unit vectors) for the accuracy table."""
    out = []
    for spread in (1e-4, 1e-3, 1e-2):
        centre = _unit(rng.normal(size=dim))
        out.append((f"collapsed, spread {spread:g}",
                    _unit(centre + spread * _unit(rng.normal(size=(size, dim))))))
    for spread in (1e-4, 1e-3):
        base = _unit(rng.normal(size=(size // 2, dim)))
        out.append((f"spread out + near-duplicate pairs {spread:g} apart",
                    np.concatenate([base, _unit(base + spread * _unit(rng.normal(size=base.shape)))])))
    centres = _unit(rng.normal(size=(2, dim)))
    out.append(("2 tight classes × 32, spread 1e-3",
                _unit(np.repeat(centres, size // 2, 0) + 1e-3 * _unit(rng.normal(size=(size, dim))))))
    return [(name, x.astype(np.float32)) for name, x in out]


def errors(fn, x):
    """Largest relative error of D_ij (i ≠ j) and of the rows of d(sum D)/dx, against float64."""
    x64 = x.astype(np.float64)
    diff = x64[:, None] - x64[None]
    d = np.sqrt(np.sum(diff**2, axis=-1))
    off = ~np.eye(len(x), dtype=bool)
    inv = np.where(off, 1.0 / np.where(off, d, 1.0), 0.0)
    want = 2.0 * (np.sum(inv, axis=1)[:, None] * x64 - inv @ x64)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        got = fn(xt)
        total = tf.reduce_sum(got)
    grad = tape.gradient(total, xt).numpy().astype(np.float64)
    rel_d = np.abs(got.numpy().astype(np.float64) - d)[off] / d[off]
    rel_g = np.linalg.norm(grad - want, axis=1) / np.linalg.norm(want, axis=1)
    return rel_d.max(), rel_g.max()


def timed(fn, jit, backward):
    def forward(a):
        return fn(a)

    def both(a):
        with tf.GradientTape() as tape:
            tape.watch(a)
            total = tf.reduce_sum(fn(a))
        return tape.gradient(total, a)

    return tf.function(both if backward else forward, jit_compile=jit)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--dim", type=int, default=128)
    args = parser.parse_args()
    print(f"Machine: {machine.describe()}")

    names = list(VARIANTS)
    print(f"\nAccuracy, B = 64, d = {args.dim} and d = 4: largest relative error of D_ij / of the gradient.")
    print("| batch | d | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for dim in (args.dim, 4):
        for name, x in batches(dim, np.random.default_rng(0)):
            cells = [errors(fn, x) for fn in VARIANTS.values()]
            print(f"| {name} | {dim} | " + " | ".join(f"{d:.1e} / {g:.1e}" for d, g in cells) + " |",
                  flush=True)

    print(f"\nSpeed, {args.dim}-d unit vectors: median of {args.runs} calls after {args.warmup}, "
          "milliseconds, forward / forward + backward.")
    print("| B | batch | variant | tf.function | + jit_compile |")
    print("|---|---|---|---:|---:|")
    for size in args.sizes:
        base = _unit(np.random.default_rng(size).normal(size=(size, args.dim)))
        paired = base.copy()
        paired[1] = _unit(base[0] + 1e-3 * _unit(np.random.default_rng(1).normal(size=args.dim)))
        for kind, values in (("random", base), ("+ 1 near-duplicate pair", paired)):
            x = tf.constant(values.astype(np.float32))
            cells = {name: [] for name in VARIANTS}
            for jit in (False, True):
                for backward in (False, True):
                    fns = [timed(fn, jit, backward) for fn in VARIANTS.values()]
                    for name, ms in zip(VARIANTS, timing.interleaved_ms(fns, (x,), args.runs, args.warmup)):
                        cells[name].append(ms)
            for name, (f, fb, xf, xfb) in cells.items():
                print(f"| {size} | {kind} | {name} | {f:.2f} / {fb:.2f} | {xf:.2f} / {xfb:.2f} |", flush=True)
    print(f"\nload average after the run: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_distances"))
