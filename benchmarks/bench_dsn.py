"""DE-DSP (Duan et al. 2019) on the bundled MNIST-5k: learned sampling policy versus
random and semi-hard triplets, and sampling time versus exhaustive search
(not a test; nothing here asserts).

Part 1 — held-out retrieval versus training steps (Duan Fig. 3a / Table 3 in
spirit). MNIST-5k, classes 0–4 train, 5–9 held out. Every step draws one pool
of ``--classes`` classes × ``--per-class`` images (``MPerClassDesign``), and
the same small CNN (``small_cnn(width=--width)``, 32-d unit-norm embedding,
triplet loss ℓ2² with margin 0.2, Adam 1e-3) is trained by

* ``dsn``: :class:`tfdml.dsn.DSNEmbeddingModel` — K = ``--minibatches`` DSN
  mini-batches of M = ``--tuples`` triplets fill one embedding batch (3·K·M
  images embedded); the DSN (trunk on 7×7 downsampled pixels) is updated by
  REINFORCE (Adam 1e-3) after every mini-batch;
* ``random``: the same model and budget with a *uniform* policy (the logit
  layers zeroed and an optimizer with learning rate 0): anchors uniform over
  classes, positive, negative class and negative uniform;
* ``semi-hard``: :class:`tfdml.models.EmbeddingModel` with
  ``TripletLoss(sampler="semi_hard")`` on the whole pool (every positive pair
  with its FaceNet semi-hard negative; all pool images embedded).

Recall@1 and MAP@R (:func:`tfdml.metrics.evaluate_embeddings`) on the 2,500
held-out images, mean ± std over ``--seeds`` seeds.

Part 2 — sampling time per mini-batch (Duan §4.2: 0.016 s vs 4.3 s): choose M
triplets from a pool with the DSN (its input and forward passes only) versus
exhaustive search (embed every pool image with the embedding network, then the
semi-hard negative of each anchor-positive pair). Pools: one training pool
and the whole training split. Embedding network: ``small_cnn(width=32)``,
the library's default. Median of ``--runs`` calls (``tf.function``, no XLA).

Usage::

    python benchmarks/bench_dsn.py [--steps 500] [--eval-every 100] [--seeds 0 1 2]
        [--classes 5] [--per-class 20] [--tuples 16] [--minibatches 2] [--width 8] [--runs 20]
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import machine  # noqa: E402  (benchmarks/machine.py)
from pipelines import designs, sources  # noqa: E402
from tfdml import dsn, losses, metrics, models  # noqa: E402

METHODS = ("dsn", "random", "semi-hard")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--classes", type=int, default=5)
    p.add_argument("--per-class", type=int, default=20)
    p.add_argument("--tuples", type=int, default=16, help="M, triplets per DSN mini-batch")
    p.add_argument("--minibatches", type=int, default=2, help="K, DSN mini-batches per step")
    p.add_argument("--width", type=int, default=8, help="small_cnn width of the trained embedding network")
    p.add_argument("--runs", type=int, default=20, help="timed calls in part 2")
    p.add_argument("--skip-training", action="store_true")
    return p.parse_args(argv)


def build(method, args, input_shape, seed):
    keras.utils.set_random_seed(seed)
    encoder = models.build_encoder(models.small_cnn(input_shape, width=args.width), embedding_dim=32)
    loss = losses.TripletLoss(margin=0.2, squared=True)
    if method == "semi-hard":
        model = models.EmbeddingModel(encoder)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
        return model
    model = dsn.DSNEmbeddingModel(
        encoder, sampler="triplet", tuples_per_minibatch=args.tuples, minibatches=args.minibatches, seed=seed
    )
    dsn_optimizer = keras.optimizers.Adam(1e-3)
    if method == "random":
        dsn_optimizer = keras.optimizers.SGD(0.0)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss, dsn_optimizer=dsn_optimizer)
    model.build((None,) + tuple(input_shape))
    if method == "random":  # uniform policy: every logit is exactly 0 and stays 0
        for layer in model.sampler.head_layers:
            if layer.name.endswith("_logit"):
                for v in layer.weights:
                    v.assign(tf.zeros_like(v))
    return model


def evaluate(model, images, labels):
    embed = tf.function(lambda x: model.encoder(x, training=False))
    emb = np.concatenate([embed(images[i : i + 500]).numpy() for i in range(0, len(images), 500)])
    r = metrics.evaluate_embeddings(emb, labels, metrics=["recall", "map@r"], ks=[1])
    return r["recall@1"], r["map@r"]


class Recorder(keras.callbacks.Callback):
    def __init__(self, images, labels):
        super().__init__()
        self.images, self.labels, self.rows, self.epoch_seconds = images, labels, [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_seconds.append(time.perf_counter() - self.start)
        self.rows.append(evaluate(self.model, self.images, self.labels))


def training_curves(args):
    source = sources.get_source("mnist5k")
    train, test = source.split("train"), source.split("test")
    test_images, test_labels = test.images, test.labels
    design = designs.MPerClassDesign(m=args.per_class, classes_per_batch=args.classes)
    checkpoints = list(range(args.eval_every, args.steps + 1, args.eval_every))
    results = {}
    for method in METHODS:
        for seed in args.seeds:
            model = build(method, args, train.image_shape, seed)
            start = evaluate(model, test_images, test_labels)
            recorder = Recorder(test_images, test_labels)
            pools = design.batches(train, seed=seed)
            t0 = time.perf_counter()
            model.fit(pools, epochs=len(checkpoints), steps_per_epoch=args.eval_every,
                      callbacks=[recorder], verbose=0)
            wall = time.perf_counter() - t0
            # Seconds per training step without the first epoch (it traces the step).
            steady = recorder.epoch_seconds[1:] or recorder.epoch_seconds
            results[(method, seed)] = ([start] + recorder.rows, float(np.median(steady)) / args.eval_every)
            print(f"  {method:9s} seed {seed}: R@1 {recorder.rows[-1][0]:.3f}  MAP@R {recorder.rows[-1][1]:.3f}"
                  f"  ({wall:.0f} s)", flush=True)
    print()
    print(f"Held-out (classes 5–9, 2,500 images) Recall@1 / MAP@R, mean ± std over seeds {args.seeds}")
    header = "| method | " + " | ".join(f"step {s}" for s in [0] + checkpoints) + " | s / step (train) |"
    print(header)
    print("|" + "---|" * (len(checkpoints) + 3))
    for method in METHODS:
        runs = [results[(method, s)] for s in args.seeds]
        cells = []
        for i in range(len(checkpoints) + 1):
            r1 = [r[0][i][0] for r in runs]
            mapr = [r[0][i][1] for r in runs]
            cells.append(f"{np.mean(r1):.3f} ± {np.std(r1):.3f} / {np.mean(mapr):.3f} ± {np.std(mapr):.3f}")
        per_step = np.mean([r[1] for r in runs])
        print(f"| {method} | " + " | ".join(cells) + f" | {per_step:.3f} |")


def semi_hard_search(encoder, pool, labels, anchor, positive, chunk=500):
    """Exhaustive search: embed the whole pool, then each pair's semi-hard negative."""
    size = tf.shape(pool)[0]
    emb = tf.concat(
        [encoder(pool[i : i + chunk], training=False) for i in range(0, int(pool.shape[0]), chunk)], axis=0
    )
    ea, ep = tf.gather(emb, anchor), tf.gather(emb, positive)
    d_ap = tf.norm(ea - ep, axis=1)
    d_an = tf.norm(ea[:, None, :] - emb[None, :, :], axis=2)  # [M, P]
    neg = tf.not_equal(tf.gather(labels, anchor)[:, None], labels[None, :])
    semi = neg & (d_an > d_ap[:, None])
    inf = tf.constant(np.inf, d_an.dtype)
    best = tf.argmin(tf.where(semi, d_an, inf), axis=1, output_type=tf.int32)
    hardest_inside = tf.argmax(tf.where(neg, d_an, -inf), axis=1, output_type=tf.int32)
    del size
    return tf.where(tf.reduce_any(semi, axis=1), best, hardest_inside)


def median_time(fn, runs, warmup=3):
    for _ in range(warmup):
        tf.nest.map_structure(lambda t: t.numpy(), fn())
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        tf.nest.map_structure(lambda t: t.numpy(), fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def sampling_times(args):
    source = sources.get_source("mnist5k")
    train = source.split("train")
    images, labels = train.images, train.labels
    keras.utils.set_random_seed(0)
    encoder = models.build_encoder(models.small_cnn(train.image_shape), embedding_dim=64)  # width 32
    net = dsn.TripletSamplerNetwork(seed=0)  # width 64, depth 2, 7×7 input
    net.build((None,) + train.image_shape)
    rng = np.random.default_rng(0)
    pools = {
        f"one pool ({args.classes} × {args.per_class})": np.concatenate(
            [rng.choice(np.flatnonzero(labels == c), args.per_class, replace=False) for c in np.unique(labels)]
        ),
        f"whole training split ({len(labels)})": np.arange(len(labels)),
    }
    m = args.tuples
    print()
    print(f"Sampling time per mini-batch of M = {m} triplets (median of {args.runs}; "
          "embedding network small_cnn(width=32), 64-d; DSN trunk 2×64 on 7×7 pixels)")
    print("| pool | DSN select (s) | exhaustive: embed pool + semi-hard search (s) | ratio |")
    print("|---|---|---|---|")
    for name, ids in pools.items():
        x = tf.constant(images[ids])
        y = tf.constant(labels[ids])
        select = tf.function(lambda x, y, s: net.select(net.features(x), y, m, s))
        choice = select(x, y, tf.constant([0, 1]))
        anchor, positive = choice.anchor, choice.positive
        search = tf.function(lambda x, y: semi_hard_search(encoder, x, y, anchor, positive))
        t_dsn = median_time(lambda: select(x, y, tf.constant([0, 1])), args.runs)
        t_search = median_time(lambda: search(x, y), max(3, args.runs // 4))
        print(f"| {name} | {t_dsn:.4f} | {t_search:.4f} | {t_search / t_dsn:.0f}× |")


def main(argv=None):
    args = parse_args(argv)
    print(f"Machine: {machine.describe()}")
    print(f"Command: python benchmarks/bench_dsn.py {' '.join(sys.argv[1:])}".rstrip())
    if not args.skip_training:
        training_curves(args)
    sampling_times(args)


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_dsn"))
