"""The smart-mining design (Harwood et al., ICCV 2017): triplet layout, negatives from the
mined table in the proportion of ``hard_fraction``, random negatives of another class
otherwise, determinism, errors, and one training step of a triplet loss on its batches."""

import numpy as np
import pytest

from pipelines import designs, sources


def _labels():
    return np.repeat(np.arange(6), [5, 4, 3, 3, 2, 1])  # 18 examples, one singleton class


def test_layout_anchors_positives_negatives():
    labels = _labels()
    design = designs.SmartMiningDesign(anchors=8, k=3)
    assert design.batch_size == 24 and designs.get_design("smart_mining", batch_size=24).anchors == 8
    assert type(design).from_config(design.get_config()).get_config() == design.get_config()
    for cols in design.index_batches(labels, seed=1).take(20):
        ids = cols["example_id"].numpy()
        a, p, n = ids[:8], ids[8:16], ids[16:]
        assert set(cols) == {"label", "class_size", "example_id"}
        np.testing.assert_array_equal(cols["label"].numpy(), labels[ids])
        assert (labels[a] == labels[p]).all() and (a != p).all()
        assert (labels[a] != labels[n]).all()
        assert (labels[a] != 5).all()  # the singleton class gives no anchor


def test_negatives_come_from_the_table_in_the_proportion_of_hard_fraction():
    labels = _labels()
    design = designs.SmartMiningDesign(anchors=8, k=2)
    plan_rows = len(labels)
    # A table whose entries are recognisable: row i -> two fixed examples of another class.
    rng = np.random.default_rng(0)
    table = np.array([rng.choice(np.flatnonzero(labels != labels[i]), 2, replace=False)
                      for i in range(plan_rows)], np.int32)
    ds = design.index_batches(labels, seed=4)
    design.neighbours.assign(table)
    for fraction in (1.0, 0.25):
        design.hard_fraction.assign(fraction)
        hits = []
        for cols in ds.take(300):
            ids = cols["example_id"].numpy()
            a, n = ids[:8], ids[16:]
            in_table = (table[a] == n[:, None]).any(axis=1)
            hits.append(in_table)
        hits = np.concatenate(hits)
        if fraction == 1.0:
            assert hits.all()
        else:
            # Mined with probability 0.25; a random negative lands in the table by chance with
            # probability 2 / (N - N_c) per anchor: about 0.25 + 0.75 * 0.15 = 0.36 here.
            chance = np.mean([2.0 / (plan_rows - np.sum(labels == labels[i])) for i in range(plan_rows)])
            assert abs(hits.mean() - (0.25 + 0.75 * chance)) < 0.05


def test_an_empty_table_gives_random_negatives_and_a_seed_fixes_the_stream():
    labels = _labels()
    one = designs.SmartMiningDesign(anchors=4, k=2, hard_fraction=0.9)
    two = designs.SmartMiningDesign(anchors=4, k=2, hard_fraction=0.9)
    a = [c["example_id"].numpy() for c in one.index_batches(labels, seed=3).take(5)]
    b = [c["example_id"].numpy() for c in two.index_batches(labels, seed=3).take(5)]
    np.testing.assert_array_equal(a, b)
    negs = np.concatenate([ids[8:] for ids in a])
    assert len(set(negs)) > 5  # not a table of -1s: drawn at random


def test_errors_name_the_fix():
    with pytest.raises(ValueError, match="multiple of 3"):
        designs.SmartMiningDesign(batch_size=20)
    with pytest.raises(ValueError, match="use k <= 1"):
        designs.SmartMiningDesign(anchors=2, k=2).validate(np.array([0, 0, 0, 1]))
    with pytest.raises(ValueError, match="at least 2 examples"):
        designs.SmartMiningDesign(anchors=2, k=1).validate(np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="at least 2 classes"):
        designs.SmartMiningDesign(anchors=2, k=1).validate(np.array([0, 0, 0]))
    design = designs.SmartMiningDesign(anchors=2, k=1)
    design.validate(_labels())
    with pytest.raises(ValueError, match="one design per training split"):
        design.validate(np.arange(10) % 2)


def test_a_triplet_loss_trains_on_the_batches_under_xla():
    import keras

    import tfdml

    feats = np.random.default_rng(0).random((30, 8, 8, 1)).astype("float32")
    split = sources.get_source("arrays", features=feats, labels=np.arange(30) % 5).split("train")
    design = designs.SmartMiningDesign(anchors=4, k=2)
    ds = design.batches(split, seed=0)
    x, cols = next(iter(ds))
    assert x.shape[0] == 12
    encoder = keras.Sequential([keras.Input(x.shape[1:]), keras.layers.Flatten(), keras.layers.Dense(4)])
    model = tfdml.models.EmbeddingModel(encoder)
    model.compile(optimizer="sgd", loss=tfdml.losses.TripletLoss(), jit_compile=True)
    history = model.fit(ds, steps_per_epoch=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_under_mirrored_strategy_every_replica_reads_the_one_table(mirrored_strategy):
    import keras

    import tfdml

    feats = np.random.default_rng(1).random((30, 4, 4, 1)).astype("float32")
    split = sources.get_source("arrays", features=feats, labels=np.arange(30) % 5).split("train")
    labels = np.asarray(split.labels)  # the table's rows are the split's examples
    design = designs.SmartMiningDesign(anchors=4, k=2)
    ds = design.batches(split, seed=0)
    rng = np.random.default_rng(2)
    table = np.array([rng.choice(np.flatnonzero(labels != labels[i]), 2, replace=False)
                      for i in range(len(labels))], np.int32)
    design.neighbours.assign(table)  # after the dataset is made: read when batches are drawn
    design.hard_fraction.assign(1.0)
    dist = mirrored_strategy.experimental_distribute_dataset(ds)
    _, cols = next(iter(dist))
    parts = [c.numpy() for c in mirrored_strategy.experimental_local_results(cols["example_id"])]
    ids = np.concatenate(parts)
    assert len(parts) == 2 and ids.shape == (12,)
    assert (table[ids[:4]] == ids[8:, None]).any(axis=1).all()
    with mirrored_strategy.scope():
        encoder = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(), keras.layers.Dense(3)])
        model = tfdml.models.EmbeddingModel(encoder)
        model.compile(optimizer="sgd", loss=tfdml.losses.TripletLoss())
    history = model.fit(ds, steps_per_epoch=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
