"""Speed of every tfdml loss + sampler pair (not a test; nothing here asserts).

One forward + backward pass (loss and its gradient with respect to the
embeddings and the loss's own trainable parameters) on a batch of
L2-normalised 128-d embeddings, ``--classes`` × ``--per-class`` examples
(default 64 × 4 = 256), with the batch-contract columns (class sizes, importance constants, example ids).
Each pair runs as a ``tf.function`` without and with ``jit_compile``, and as
``EmbeddingModel.compile(jit_compile="loss")`` runs it (the default on a
CPU): a ``tf.function`` around :class:`tfdml.models.CompiledLoss`, which
compiles the loss and its gradient unless the loss reports XLA slower for
the batch. The table gives the median wall time of ``--runs`` rounds after
``--warmup`` calls, the three modes' calls interleaved in each round
(``timing.py``).

Usage::

    python benchmarks/bench_losses.py [--runs 30] [--warmup 3] [--classes 64] [--per-class 4] [--dim 128]
                                      [--only "all pairs" N-pair ...]
    python benchmarks/bench_losses.py --classes 256                  # B = 1024
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# This checkout's tfdml first, not an installed one; machine.py beside this file.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import machine  # noqa: E402  (benchmarks/machine.py)
import timing  # noqa: E402  (benchmarks/timing.py)

from tfdml import losses, models, samplers  # noqa: E402


def cases(num_classes, dim=128):
    """(loss, sampler, factory) for every loss + sampler pair; ``num_classes`` and ``dim`` size
    the learned per-class parameters (β_class, proxies)."""
    s = samplers
    out = [
        ("contrastive (Wu §3)", "all pairs", lambda: losses.ContrastiveLoss()),
        ("contrastive (Wu §3)", "random", lambda: losses.ContrastiveLoss(sampler=s.RandomPairSampler(), seed=1)),
        ("contrastive (Wu §3)", "semi_hard", lambda: losses.ContrastiveLoss(sampler="semi_hard")),
        ("contrastive (Wu §3)", "hdc", lambda: losses.ContrastiveLoss(sampler="hdc")),
        ("contrastive (Wu §3)", "distance_weighted",
         lambda: losses.ContrastiveLoss(sampler="distance_weighted", seed=1)),
        ("contrastive ℓ2 (draft Eq. 18)", "all pairs", lambda: losses.ContrastiveLoss(squared=False)),
        ("triplet ℓ2² (FaceNet)", "semi_hard", lambda: losses.TripletLoss()),
        ("triplet ℓ2² (FaceNet)", "hard", lambda: losses.TripletLoss(sampler="hard")),
        ("triplet ℓ2² (FaceNet)", "distance_weighted",
         lambda: losses.TripletLoss(sampler="distance_weighted", seed=1)),
        ("triplet ℓ2 (Wu §4)", "semi_hard", lambda: losses.TripletLoss(squared=False)),
        ("triplet ℓ2 (Wu §4)", "hard", lambda: losses.TripletLoss(squared=False, sampler="hard")),
        ("triplet ℓ2 (Wu §4)", "distance_weighted",
         lambda: losses.TripletLoss(squared=False, sampler="distance_weighted", seed=1)),
        ("margin (Wu §4)", "distance_weighted", lambda: losses.MarginLoss(num_classes=num_classes, seed=1)),
        ("margin (Wu §4)", "semi_hard", lambda: losses.MarginLoss(num_classes=num_classes, sampler="semi_hard")),
        ("margin (Wu §4)", "random",
         lambda: losses.MarginLoss(num_classes=num_classes, sampler=s.RandomPairSampler(), seed=1)),
        ("margin (Wu §4)", "all pairs", lambda: losses.MarginLoss(num_classes=num_classes, sampler=None)),
        ("weighted contrastive (Hong Eq. 23)", "all pairs + W", lambda: losses.WeightedContrastiveLoss()),
        ("balanced contrastive (Hong Eq. 15)", "all pairs + W",
         lambda: losses.BalancedContrastiveLoss(num_classes=num_classes)),
        ("N-pair (Duan Eq. 9)", "pairs by class rank", lambda: losses.NPairLoss()),
        ("stable contrast (draft Eq. 16)", "distance_weighted", lambda: losses.StableContrastLoss(seed=1)),
        ("stable contrast (draft Eq. 16)", "semi_hard", lambda: losses.StableContrastLoss(sampler="semi_hard")),
        ("robust hard contrast (draft Eq. 22)", "in the loss", lambda: losses.RobustHardContrastiveLoss()),
    ]
    if hasattr(samplers, "TopKMisplacedSampler"):
        out.append(("ℓ_k (Lu Eq. 5)", "top_k misplaced", lambda: losses.PrecisionAtKLoss(k=5)))
    out += [
        ("lifted structured (Song Eq. 4)", "all pairs", lambda: losses.LiftedStructuredLoss()),
        ("lifted generalized (Hermans §2)", "all pairs", lambda: losses.LiftedStructuredLoss(generalized=True)),
        ("binomial deviance (Yi 2014)", "all pairs", lambda: losses.BinomialDevianceLoss()),
        ("multi-similarity (Wang 2019)", "multi_similarity", lambda: losses.MultiSimilarityLoss()),
        ("circle (Sun 2020 Eq. 6)", "all pairs", lambda: losses.CircleLoss()),
        ("histogram (Ustinova Eq. 4)", "all pairs", lambda: losses.HistogramLoss()),
        ("global (Kumar 2016)", "all pairs", lambda: losses.GlobalLoss()),
        ("angular (Wang 2017 Eq. 8)", "pairs by class rank", lambda: losses.AngularLoss()),
        ("proxy NCA (Movshovitz-Attias §3)", "proxies",
         lambda: losses.ProxyNCALoss(num_classes=num_classes, embedding_dim=dim, seed=1)),
        ("proxy anchor (Kim Eq. 4)", "proxies",
         lambda: losses.ProxyAnchorLoss(num_classes=num_classes, embedding_dim=dim, seed=1)),
        ("facility location (Song 2017)", "in the loss", lambda: losses.FacilityLocationLoss()),
        ("NT-Xent (Chen 2020 Eq. 1)", "two views", lambda: losses.NTXentLoss()),
        ("SupCon (Khosla 2020 Eq. 2)", "two views", lambda: losses.SupConLoss()),
        ("VICReg (Bardes 2022)", "two views", lambda: losses.VICRegLoss()),
        ("Barlow Twins (Zbontar 2021 Eq. 1)", "two views", lambda: losses.BarlowTwinsLoss()),
        ("DDML (Hu 2014)", "all pairs", lambda: losses.DDMLLoss()),
        ("DAML (Duan 2018), triplet", "random_triplets + generator",
         lambda: losses.DAMLLoss(embedding_dim=dim, seed=1)),
        ("normalized softmax (Zhai & Wu 2019)", "class weights",
         lambda: losses.NormalizedSoftmaxLoss(num_classes=num_classes, embedding_dim=dim, seed=1)),
        ("CosFace (Wang 2018 Eq. 4)", "class weights",
         lambda: losses.CosFaceLoss(num_classes=num_classes, embedding_dim=dim, seed=1)),
        ("ArcFace (Deng 2019 Eq. 3)", "class weights",
         lambda: losses.ArcFaceLoss(num_classes=num_classes, embedding_dim=dim, seed=1)),
        ("sub-center ArcFace (Deng 2020)", "class weights",
         lambda: losses.SubCenterArcFaceLoss(num_classes=num_classes, embedding_dim=dim, seed=1)),
        ("SoftTriple (Qian 2019)", "class weights",
         lambda: losses.SoftTripleLoss(num_classes=num_classes, embedding_dim=dim, seed=1)),
        ("FastAP (Cakir 2019)", "all queries", lambda: losses.FastAPLoss()),
        ("PDDM quadruplet (Huang 2016)", "hard quadruplet by S",
         lambda: losses.PDDMLoss(embedding_dim=dim, seed=1)),
        ("PDDM triplet (Huang 2016)", "hard triplet by S",
         lambda: losses.PDDMLoss(embedding_dim=dim, variant="triplet", seed=1)),
        # Two level blocks of dim / 2 (any even dim), each trained on the pairs the one before kept.
        ("contrastive + HDC cascade (Yuan 2017)", "hdc per level", lambda: losses.HDCLoss(levels=2)),
    ]
    return out


def batch(num_classes, per_class, dim, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(num_classes), per_class).astype(np.int32)
    size = len(labels)
    e = rng.normal(size=(size, dim)).astype(np.float32)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    y = {
        "label": tf.constant(labels),
        "class_size": tf.constant(rng.integers(5, 60, size=num_classes)[labels].astype(np.float32)),
        "w_pos": tf.fill([size], 1e-3),
        "w_neg": tf.fill([size], 1e-5),
        # two rows per id: the two-view losses see rows 2k and 2k + 1 (one class) as views of
        # one image; no other loss here reads the column
        "example_id": tf.range(size, dtype=tf.int32) // 2,
    }
    return y, tf.constant(e)


#: The modes timed, as ``EmbeddingModel.compile(jit_compile=...)`` names them.
MODES = (False, True, models.LOSS_ONLY)


def step_fn(loss, jit):
    """Forward + backward of ``loss`` as a ``tf.function`` in mode ``jit`` (one of MODES)."""
    params = [v for layer in loss.parameter_layers for v in layer.trainable_variables]
    call = models.CompiledLoss(loss, lambda: params) if jit == models.LOSS_ONLY else loss

    def step(y, e):
        with tf.GradientTape() as tape:
            tape.watch(e)
            value = call(y, e)
        grads = tape.gradient(value, [e] + params)
        return value, [tf.convert_to_tensor(g) for g in grads]  # β_class: IndexedSlices

    return tf.function(step, jit_compile=jit is True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--classes", type=int, default=64)
    parser.add_argument("--per-class", type=int, default=4)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--only", nargs="+", default=None, metavar="TEXT",
                        help="only the rows whose 'loss | sampler' contains one of these texts")
    args = parser.parse_args(argv)

    y, e = batch(args.classes, args.per_class, args.dim)
    print(f"Machine: {machine.describe()}")
    print(
        f"Forward + backward, batch {args.classes * args.per_class} ({args.classes} classes × "
        f"{args.per_class}), {args.dim}-d unit embeddings; median of {args.runs} rounds (the modes' "
        f"calls interleaved) after {args.warmup} warm-up calls, milliseconds."
    )
    header = (f"| {'loss':<36} | {'sampler':<20} | {'tf.function':>11} | {'+ jit_compile':>13} "
              f"| {'jit_compile=loss':>16} |")
    print(header)
    print(f"|{'-' * 38}|{'-' * 22}|{'-' * 12}:|{'-' * 14}:|{'-' * 17}:|")
    for name, sampler, factory in cases(args.classes, args.dim):
        if args.only and not any(text in f"{name} | {sampler}" for text in args.only):
            continue
        fns = [step_fn(factory(), jit) for jit in MODES]
        row = timing.interleaved_ms(fns, (y, e), args.runs, args.warmup)
        print(f"| {name:<36} | {sampler:<20} | {row[0]:>11.2f} | {row[1]:>13.2f} | {row[2]:>16.2f} |",
              flush=True)


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_losses"))
