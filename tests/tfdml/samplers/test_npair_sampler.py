"""N-pair sampling (Sohn 2016's batch, as a triplet sampler in Duan et al. 2019, Table 3): the triplets
(x_i, x_i⁺, x_j⁺), j ≠ i, of a batch of two examples per class, against a brute-force NumPy loop."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.tfdml.losses.test_triplet_loss import np_triplet
from tfdml import errors, losses, masks, samplers


def _brute_npair(y, cand):
    """In batch order the first example of a class is its anchor, the second its positive; the
    negatives of anchor i are the positives of the other classes (candidate pairs only)."""
    first, second = {}, {}
    for i, label in enumerate(y):
        (second if label in first else first)[label] = i
    out = set()
    for label, a in first.items():
        p = second[label]
        if not cand[a, p]:
            continue
        for other, n in second.items():
            if other != label and cand[a, n]:
                out.add((a, p, n))
    return out


def _triplets(selection):
    a, p, n, m = (np.asarray(t) for t in selection)
    return {(int(a[t]), int(p[t]), int(n[t])) for t in range(len(m)) if m[t]}


def _npair_batch(num_classes, seed):
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.repeat(rng.choice(50, num_classes, replace=False), 2)).astype(np.int32)
    x = rng.normal(size=(len(y), 5))
    return np.linalg.norm(x[:, None] - x[None], axis=-1).astype(np.float32), y


@pytest.mark.parametrize("num_classes", [1, 2, 5, 9])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_brute_force(num_classes, seed):
    d, y = _npair_batch(num_classes, seed)
    cand = masks.candidate_mask(y).numpy()
    selection = samplers.NPairSampler()(d, y)
    got = _triplets(selection)
    assert got == _brute_npair(y, cand)
    assert len(got) == num_classes * (num_classes - 1)  # N anchors, N − 1 negatives each
    assert selection.mask.shape == (len(y) ** 2,)


def test_hand_case_and_the_test_can_fail():
    y = np.array([4, 7, 4, 9, 7, 9], np.int32)
    sel = samplers.NPairSampler()(np.zeros((6, 6), np.float32), y)
    want = {(0, 2, 4), (0, 2, 5), (1, 4, 2), (1, 4, 5), (3, 5, 2), (3, 5, 4)}
    assert _triplets(sel) == want
    # anchors' own classes' other examples, or the other classes' anchors, are never negatives
    assert not {(0, 2, 1), (0, 2, 3)} & _triplets(sel)


def test_pair_id_restricts_the_candidates():
    y = np.array([0, 1, 0, 2, 1, 2], np.int32)
    pair_id = np.array([0, 0, 0, 1, 0, 1], np.int32)
    cand = masks.candidate_mask(y, pair_id).numpy()
    sel = samplers.NPairSampler()(np.ones((6, 6), np.float32), y, cand)
    assert _triplets(sel) == _brute_npair(y, cand) == {(0, 2, 4), (1, 4, 2)}


@pytest.mark.parametrize("labels", [[0, 0, 0, 1, 1, 2], [0, 1, 2, 3], [5], [0, 0, 1]])
def test_a_batch_not_two_per_class_is_refused_eagerly_and_selects_nothing_in_a_graph(labels):
    y = np.array(labels, np.int32)
    d = np.ones((len(y), len(y)), np.float32)
    with pytest.raises(errors.InvalidInputError, match=r"exactly two examples of each class.*MPerClassDesign"):
        samplers.NPairSampler()(d, y)
    graph = tf.function(lambda d, y: samplers.NPairSampler()(d, y).mask)
    assert not graph(d, y).numpy().any()


def test_a_cross_batch_memory_is_never_chosen():
    d, y = _npair_batch(3, 4)
    wide = np.concatenate([d, np.zeros((6, 4), np.float32)], axis=1)  # 4 memory rows of the same classes
    labels = np.concatenate([y, y[:4]])
    sel = samplers.NPairSampler()(wide, labels)
    assert _triplets(sel) == _brute_npair(y, masks.candidate_mask(y).numpy())


def test_xla_with_unknown_batch_equals_eager():
    d, y = _npair_batch(6, 5)
    spec = (tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.int32))
    run = lambda d, y: tuple(samplers.NPairSampler()(d, y))  # noqa: E731
    compiled = tf.function(run, input_signature=spec, jit_compile=True)
    for e, c in zip(run(d, y), compiled(d, y)):
        np.testing.assert_array_equal(e.numpy(), c.numpy())
    bad = np.array([0, 0, 0, 1, 1, 2] * 2, np.int32)
    assert not compiled(d, bad)[3].numpy().any()


@pytest.mark.parametrize("seed", [0, 3])
def test_triplet_loss_on_npair_triplets(seed):
    """Duan et al. Table 3's "N-pair sampling" row: the triplet loss on these triplets."""
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.repeat(np.arange(6), 2)).astype(np.int32)
    e = rng.normal(size=(12, 5))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    d = np.linalg.norm(e[:, None] - e[None], axis=-1)
    expected = np_triplet(d, sorted(_brute_npair(y, masks.candidate_mask(y).numpy())), 0.2, True)
    loss = losses.TripletLoss(sampler="npair")
    np.testing.assert_allclose(float(loss(y, e.astype(np.float32))), expected, rtol=1e-5)
    spec = [tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, 5], tf.float32)]
    compiled = tf.function(lambda y, e: loss(y, e), input_signature=spec, jit_compile=True)
    np.testing.assert_allclose(float(compiled(y, e.astype(np.float32))), expected, rtol=1e-5)


def test_config_round_trip_in_a_loss():
    loss = losses.TripletLoss(sampler="npair")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert isinstance(restored.sampler, samplers.NPairSampler)
    assert [c.column for c in restored.input_checks()] == ["label", "pair_id", "example_id", "label"]
    assert samplers.get("npair") == samplers.NPairSampler() and samplers.NPairSampler().get_config() == {}


def test_a_config_needs_two_examples_per_class_and_trains_under_xla():
    """In a config the design must give two examples per class; from model.fit, under XLA, the
    N-pair triplets train (finite loss) and a batch of other classes stops after the step."""
    from tfdml import models
    from tfdml_app import config

    with pytest.raises(config.ConfigError, match=r"NPairSampler\) needs exactly 2 examples.*design.options.m = 8"):
        config.validate({"loss": {"name": "triplet", "sampler": "npair"}, "design": {"name": "m_per_class", "options": {"m": 8}}})
    cfg = config.validate({"loss": {"name": "ddml", "sampler": "npair"}, "design": {"name": "m_per_class", "options": {"m": 2}}})
    assert isinstance(config.build_loss(cfg, num_classes=4).sampler, samplers.NPairSampler)

    keras.utils.set_random_seed(0)
    encoder = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.UnitNormalization()])
    model = models.EmbeddingModel(encoder)
    model.compile(optimizer="sgd", loss=losses.DDMLLoss(sampler="npair"), jit_compile=True)
    x = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    history = model.fit(x, np.repeat(np.arange(4), 2), batch_size=8, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    with pytest.raises(errors.InvalidInputError, match="exactly two examples of each class"):
        model.fit(x, np.repeat(np.arange(2), 4), batch_size=8, epochs=1, verbose=0)
