"""Smart mining's refresh cost per epoch (not a test): embed the training split, build the
nearest-neighbour index, query every example for its neighbours of another class
(:func:`tfdml.mining.hard_negative_table`), for each index kind.

Data: the kanji set's training split (``study/kanji_fonts.py`` writes it to
``~/.cache/tfdml/kanji_fonts-32/kanji_fonts.npz``; tens of thousands of 32x32 images)
embedded by the shipped config's model (small_cnn, width 64, flatten, 128-d, normalised;
untrained: the cost does not depend on the weights), when that file exists and ``--size`` is
not given; otherwise ``--size`` random 128-d unit vectors in ``--classes`` classes (no
embedding step). Every stage is timed once per ``--runs`` repetition; the median is
reported, with recall@k of the approximate tables against the exact one.

Usage::

    python benchmarks/bench_smart_mining.py [--npz PATH | --size N] [--k 10]
        [--kinds exact hnsw ivf] [--runs 3] [--record]
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402  (benchmarks/machine.py)

KANJI = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                     "tfdml", "kanji_fonts-32", "kanji_fonts.npz")

#: Index kind -> the arguments of hard_negative_table that search so.
KINDS = {
    "exact": {},
    "hnsw": {"backend": "faiss", "approximate": "hnsw"},
    "ivf": {"backend": "faiss", "approximate": "ivf"},
}


def kanji_split(path):
    """``(images [N, 32, 32, 1] float32, labels [N])`` of the file's training examples."""
    with np.load(path, allow_pickle=False) as data:
        train = ~data["test"]
        images = data["images"][train].astype(np.float32)[..., None] / 255.0
        return images, data["codepoints"][train]


def embedder(image_shape):
    """The shipped config's encoder (configs/harwood_smart_mining.yaml), untrained."""
    import keras

    from tfdml import backbones

    backbone = backbones.get_backbone("small_cnn", input_shape=image_shape, width=64, pooling="flatten")
    return keras.Sequential([keras.Input(image_shape), backbone, keras.layers.Dense(128),
                             keras.layers.UnitNormalization()])


def refresh_times(embeddings_or_images, labels, k, kinds, runs, embed=True, batch=256):
    """``{stage: median seconds}`` for ``embed`` (when given images) and, per kind, the table
    (index build + queries), and ``{kind: recall@k}`` against the exact table."""
    import tensorflow as tf

    from tfdml.mining import hard_negative_table

    times = {}
    x = embeddings_or_images
    if embed:
        model = embedder(x.shape[1:])
        data = tf.data.Dataset.from_tensor_slices(x).batch(batch)
        from tfdml.search.embedding import embed_dataset

        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            emb, _ = embed_dataset(model, data, verbose=0)
            samples.append(time.perf_counter() - start)
        times["embed"] = statistics.median(samples)
        x = emb
    tables, recall = {}, {}
    for kind in kinds:
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            tables[kind] = hard_negative_table(x, labels, k, **KINDS[kind])
            samples.append(time.perf_counter() - start)
        times[f"table {kind}"] = statistics.median(samples)
    if "exact" in tables:
        for kind, table in tables.items():
            recall[kind] = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(table, tables["exact"])]))
    return times, recall


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--npz", default=KANJI, help="a kanji_fonts.npz (default: the cache's)")
    parser.add_argument("--size", type=int, default=None, help="random embeddings of this many examples "
                        "instead of the kanji set")
    parser.add_argument("--classes", type=int, default=3000, help="classes of the random embeddings")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"Machine: {machine.describe()}")
    if args.size is None and os.path.isfile(args.npz):
        x, labels = kanji_split(args.npz)
        print(f"Data: {args.npz}: {len(labels):,} training images, {len(np.unique(labels)):,} classes")
        embed = True
    else:
        size = args.size or 30_000
        rng = np.random.default_rng(0)
        x = rng.standard_normal((size, 128)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        labels = np.arange(size) % min(args.classes, size // 2)
        print(f"Data: {size:,} random 128-d unit vectors, {len(np.unique(labels)):,} classes (no embedding)")
        embed = False
    times, recall = refresh_times(x, labels, args.k, args.kinds, args.runs, embed=embed)
    print("\n".join(refresh_table(times, recall, args.k, args.runs, len(labels))))
    return times, recall


def refresh_table(times, recall, k, runs, examples):
    """The Markdown table of one refresh's stages over ``examples`` examples: seconds (median
    of ``runs``) and, for a table, its recall@k against the exact one."""
    lines = [f"| stage, {examples:,} examples | s (median of {runs}) | recall@{k} against exact |", "|---|---:|---:|"]
    for stage, seconds in times.items():
        kind = stage.split(" ")[-1]
        lines.append(f"| {stage} | {seconds:.1f} | {f'{recall[kind]:.3f}' if kind in recall else ''} |")
    return lines


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_smart_mining"))
