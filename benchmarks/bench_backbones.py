"""Benchmark of the pretrained backbones (not a test; nothing here asserts).

Two parts:

``throughput``
    images/s of one training step (EfficientNet-Lite0 + 128-d embedding head,
    margin loss with distance weighted sampling, Adam) and of embedding
    (inference forward pass), at 224x224, batch 16, on this machine's CPU;
    median over several timed runs after warm-up.

``retrieval``
    held-out Recall@1 and MAP@R on the bundled MNIST-5k (classes 0-4
    train, 5-9 test, grey repeated to 3 channels, resized): margin loss +
    distance weighted sampling (Wu et al. 2017 §4) with the backbone
    initialised from the bundled ImageNet weights vs the same backbone from
    scratch, same steps, batches, seeds and optimizer.

Usage::

    python benchmarks/bench_backbones.py throughput [--batch 16] [--runs 7]
    python benchmarks/bench_backbones.py retrieval [--size 96] [--steps 150]
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import machine  # noqa: E402  (benchmarks/machine.py)

from tfdml import losses, models  # noqa: E402
from tfdml.backbones import get_backbone  # noqa: E402


def embedding_model(weights, input_shape, seed=0, jit_compile="auto"):
    keras.utils.set_random_seed(seed)
    backbone = get_backbone("efficientnet_lite0", weights=weights, input_shape=input_shape,
                            input_range=(0, 1))
    encoder = models.build_encoder(backbone, embedding_dim=128)
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss=losses.MarginLoss(sampler="distance_weighted", seed=seed),
                  jit_compile=jit_compile)
    return model


def _median_time(fn, runs, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def throughput(batch, runs, size=224, jit_compile="auto"):
    shape = (size, size, 3)
    model = embedding_model("bundled", shape, jit_compile=jit_compile)
    rng = np.random.default_rng(0)
    x = rng.uniform(0.0, 1.0, (batch,) + shape).astype(np.float32)
    y = np.repeat(np.arange(batch // 4), 4).astype(np.int32)  # 4 examples per class
    train_t, train_all = _median_time(lambda: model.train_on_batch(x, y), runs)
    embed_t, embed_all = _median_time(lambda: model.predict_on_batch(x), runs)
    print(f"machine: {machine.describe()}")
    print(f"model: efficientnet_lite0 (bundled ImageNet weights) + Dense(128) + L2; "
          f"MarginLoss(distance_weighted), Adam; jit_compile={model.jit_compile}")
    print(f"input {size}x{size}x3, batch {batch}, median of {runs} runs after 2 warm-up runs")
    print(f"train step: {batch / train_t:7.1f} images/s  ({train_t * 1e3:.0f} ms/step; "
          f"runs {', '.join(f'{t * 1e3:.0f}' for t in train_all)} ms)")
    print(f"embedding:  {batch / embed_t:7.1f} images/s  ({embed_t * 1e3:.0f} ms/batch; "
          f"runs {', '.join(f'{t * 1e3:.0f}' for t in embed_all)} ms)")


def _mnist5k(size):
    from pipelines import sources

    out = []
    for split in (sources.get_source("mnist5k").split(name) for name in ("train", "test")):
        x = tf.image.resize(split.images, (size, size), method="bilinear").numpy()
        out.append((np.repeat(x, 3, axis=-1), split.class_ids[split.labels].astype(np.int32)))
    return tuple(out)


def _batches(labels, steps, classes_per_batch, per_class, seed):
    """Index array [steps, P*K]: P classes, K examples each (Wu §5.1 style batches)."""
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    by_class = [np.flatnonzero(labels == c) for c in classes]
    out = np.empty((steps, classes_per_batch * per_class), np.int64)
    for s in range(steps):  # index bookkeeping only, before training starts
        chosen = rng.choice(len(classes), classes_per_batch, replace=False)
        out[s] = np.concatenate([rng.choice(by_class[c], per_class, replace=False)
                                 for c in chosen])
    return out


def _describe(emb):
    finite = np.isfinite(emb).all(axis=1)
    spread = float(np.std(emb[finite], axis=0).sum()) if finite.any() else float("nan")
    return f"non-finite {int((~finite).sum())}/{len(emb)}, per-dim std sum {spread:.3f}"


def retrieval(size, steps, classes_per_batch, per_class, seed=0, arms=("bundled", "scratch")):
    try:
        from tfdml.metrics.retrieval import retrieval_metrics
    except ImportError:
        print("tfdml.metrics.retrieval is not available: retrieval part skipped")
        return
    (x_tr, y_tr), (x_te, y_te) = _mnist5k(size)
    index = _batches(y_tr, steps, classes_per_batch, per_class, seed)
    print(f"machine: {machine.describe()}")
    print(f"MNIST-5k (bundled): train classes 0-4 ({len(y_tr)} images), test classes 5-9 "
          f"({len(y_te)} images, leave-one-out retrieval), resized to {size}x{size}x3")
    print(f"{steps} steps, batch {classes_per_batch} classes x {per_class}, "
          "MarginLoss (alpha 0.2, beta0 1.2) + distance weighted sampling, Adam 1e-4, 128-d")
    for arm in arms:
        weights = "bundled" if arm == "bundled" else None
        model = embedding_model(weights, (size, size, 3), seed=seed)
        before = retrieval_metrics(model.embed(x_te, batch_size=64), y_te)
        data = tf.data.Dataset.from_tensor_slices(index).map(
            lambda i: (tf.gather(x_tr, i), tf.gather(y_tr, i)))
        t0 = time.perf_counter()
        hist = model.fit(data, epochs=1, verbose=0)
        train_s = time.perf_counter() - t0
        emb = model.embed(x_te, batch_size=64)
        after = retrieval_metrics(emb, y_te)
        name = "pretrained (bundled ImageNet)" if weights else "from scratch"
        print(f"{name:30s} before: R@1 {before['recall@1']:.4f} MAP@R {before['map@r']:.4f} | "
              f"after: R@1 {after['recall@1']:.4f} MAP@R {after['map@r']:.4f} | "
              f"final loss {hist.history['loss'][-1]:.4f}, {train_s:.0f} s; "
              f"test embeddings: {_describe(emb)}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="part", required=True)
    p = sub.add_parser("throughput")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--jit", choices=("auto", "true", "false"), default="auto",
                   help="jit_compile of model.compile (XLA)")
    r = sub.add_parser("retrieval")
    r.add_argument("--size", type=int, default=96)
    r.add_argument("--steps", type=int, default=150)
    r.add_argument("--classes-per-batch", type=int, default=4)
    r.add_argument("--per-class", type=int, default=8)
    r.add_argument("--arms", nargs="+", choices=("bundled", "scratch"),
                   default=["bundled", "scratch"])
    args = parser.parse_args(argv)
    if args.part == "throughput":
        jit = {"auto": "auto", "true": True, "false": False}[args.jit]
        throughput(args.batch, args.runs, args.size, jit)
    else:
        retrieval(args.size, args.steps, args.classes_per_batch, args.per_class,
                  arms=tuple(args.arms))


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_backbones"))
