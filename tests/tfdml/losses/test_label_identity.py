"""Class identity is exact integer equality, for any int64 label, in every dtype policy.

Keras' ``Loss.__call__`` casts ``y_true`` to the loss dtype; a float32 holds
integers exactly only up to 2²⁴ (2²⁴ + 1 rounds to 2²⁴), a bfloat16 up to 2⁸,
so two classes with large ids used to merge into one. A
loss depends on labels only through equality, so relabelling the classes by
any injective map must leave its value unchanged: that is the reference here.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import losses, models, replica_gather

from tests.tfdml.losses.test_loss_common import FACTORIES, NAMES, batch

# An injective relabelling of the classes 0..5 of the "mixed" batch onto ids
# that no float32 tells apart (2**24, 2**24 + 1), beyond int32 (2**40, 2**62),
# negative ones, and 256 / 257, which bfloat16 merges.
RELABEL = {
    0: 2**24,
    1: 2**24 + 1,
    2: 2**40,
    3: -7,
    4: -(2**33),
    5: 2**62,
}
SMALL_FLOAT_RELABEL = {0: 256, 1: 257, 2: 258, 3: 259, 4: 260, 5: 261}

# Losses whose learned parameters are indexed by the label (β_class) need
# labels 0..L-1 and are checked with relabelled examples only (example_id).
INDEXED_BY_LABEL = {"margin"}


def relabelled(y, mapping):
    y = dict(y)
    y["label"] = np.array([mapping[int(v)] for v in y["label"]], np.int64)
    return y


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mapping", [RELABEL, SMALL_FLOAT_RELABEL], ids=["large", "bfloat16_range"])
def test_relabelling_classes_leaves_every_loss_unchanged(ref, name, mapping):
    if name in INDEXED_BY_LABEL:
        pytest.skip("β_class is indexed by the label (0..num_classes-1)")
    y, e = batch(ref)
    expected = FACTORIES[name]()(y, e).numpy()
    got = FACTORIES[name]()(relabelled(y, mapping), e).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


def test_the_issue_example_contrastive_2_pow_24():
    """The reported example: 13.84 (the one-class value) instead of 5.54."""
    e = np.random.default_rng(0).normal(size=(8, 8)).astype("float32")
    loss = losses.ContrastiveLoss()
    big = loss(np.array([2**24] * 4 + [2**24 + 1] * 4), e).numpy()
    small = loss(np.array([0] * 4 + [1] * 4), e).numpy()
    one_class = loss(np.zeros(8, np.int64), e).numpy()
    assert small != pytest.approx(one_class)
    np.testing.assert_allclose(big, small, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("name", ["contrastive", "triplet_hard", "npair", "balanced_contrastive"])
def test_low_precision_policies_keep_classes_apart(ref, name, dtype):
    y, e = batch(ref)
    loss = type(FACTORIES[name]()).from_config({**FACTORIES[name]().get_config(), "dtype": dtype})
    expected = loss(y, e).numpy()
    for mapping in (RELABEL, SMALL_FLOAT_RELABEL):
        loss = type(loss).from_config(loss.get_config())
        np.testing.assert_array_equal(loss(relabelled(y, mapping), e).numpy(), expected)


def test_margin_example_ids_beyond_float_precision_are_exact(ref):
    """β_img is gathered by example_id; 2**24 + 1 must not land on 2**24."""
    num = 2**24 + 4
    loss = losses.MarginLoss(num_examples=num, sampler="all", learn_beta0=False)
    beta_img = np.zeros(num, np.float32)
    beta_img[2**24 + 1] = 0.5  # only the example at 2**24 + 1 gets a larger margin
    loss.margin_parameters.beta_img.assign(beta_img)
    labels = np.array([0, 0, 1, 1])
    example_id = np.array([0, 1, 2**24 + 1, 3], np.int64)
    got = loss.margin_parameters.beta(labels, example_id).numpy()
    np.testing.assert_allclose(got, [1.2, 1.2, 1.7, 1.2])


def test_margin_refuses_a_label_that_wraps_in_int32():
    """2**32 + 1 is not class 1: the range check sees the int64 value."""
    loss = losses.MarginLoss(num_classes=4)
    e = np.eye(4, dtype=np.float32)
    with pytest.raises(ValueError, match="must lie in"):
        loss(np.array([0, 0, 2**32 + 1, 2**32 + 1], np.int64), e)


def test_float_labels_warn(ref, monkeypatch):
    from tfdml import targets

    monkeypatch.setattr(targets, "_warned_float_ids", set())  # warned once per process
    y, e = batch(ref)
    with pytest.warns(UserWarning, match="arrives as float32"):
        losses.ContrastiveLoss()({**y, "label": y["label"].astype(np.float32)}, e)


def test_per_example_sample_weight_is_refused(ref):
    y, e = batch(ref)
    with pytest.raises(ValueError, match="takes no per-example sample_weight"):
        losses.ContrastiveLoss()(y, e, sample_weight=np.ones(len(e), np.float32))


def _fit_losses(labels, jit_compile, dtype=None):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(len(labels), 6)).astype("float32")
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,))
    encoder = keras.Model(inputs, keras.layers.UnitNormalization()(keras.layers.Dense(4)(inputs)))
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=losses.TripletLoss(sampler="hard", margin=0.5, dtype=dtype), jit_compile=jit_compile)
    ds = tf.data.Dataset.from_tensors((x, {"label": labels})).repeat()
    return model.fit(ds, steps_per_epoch=3, epochs=1, verbose=0).history["loss"]


@pytest.mark.parametrize("jit_compile,dtype", [(False, None), (True, None), (False, "mixed_bfloat16"),
                                               (True, "float16")])
def test_fit_with_large_labels_equals_fit_with_small_ones(jit_compile, dtype):
    """Through model.fit: hard triplets on classes 2**24 and 2**24 + 1 used to
    give loss 0 (one class, no negatives) and learn nothing."""
    small = np.array([0, 0, 0, 1, 1, 1, 2, 2], np.int64)
    expected = _fit_losses(small, jit_compile, dtype)
    assert expected[0] > 0
    for mapping in (RELABEL, SMALL_FLOAT_RELABEL):
        big = np.array([mapping[v] for v in small], np.int64)
        np.testing.assert_allclose(_fit_losses(big, jit_compile, dtype), expected, rtol=1e-5)


@pytest.mark.parametrize("method", ["all_gather", "sum"])
def test_replica_gather_keeps_int64_ids_exact(method, mirrored_strategy, monkeypatch):
    monkeypatch.setattr(replica_gather, "GATHER_METHOD", method)
    ids = np.array([2**62 + 1, -(2**40) - 3, 2**24 + 1, 7], np.int64)

    @tf.function
    def step(value):
        return replica_gather.gather_across_replicas(value, tf.zeros([2, 1]))[0]

    per_replica = mirrored_strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(ids[2 * ctx.replica_id_in_sync_group: 2 * ctx.replica_id_in_sync_group + 2])
    )
    gathered = mirrored_strategy.run(step, args=(per_replica,))
    for local in mirrored_strategy.experimental_local_results(gathered):
        np.testing.assert_array_equal(local.numpy(), ids)
