"""Every sampler: XLA (jit_compile) equals eager for the same seed; config round trips; get()."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdml import masks, primitives, samplers
from tfdml.kernels import chosen

EMBEDDING_DIM = 8


ALL = [
    samplers.AllPairsSampler(),
    samplers.RandomPairSampler(num_pairs=40),
    samplers.SemiHardSampler(),
    samplers.SemiHardSampler(fallback="drop"),
    samplers.HardSampler(),
    samplers.DistanceWeightedSampler(),
    samplers.DistanceWeightedSampler(cutoff=0.3, nonzero_loss_cutoff=None, lam=5.0, embedding_dim=8),
    samplers.TopKMisplacedSampler(k=3),
    samplers.MultiSimilaritySampler(epsilon=0.05),
    samplers.RandomTripletSampler(),
    samplers.RandomTripletSampler(num_triplets=30),
    samplers.EasyHardSampler(),
    samplers.EasyHardSampler(negative="semi_hard"),
    samplers.PairMarginSampler(pos_margin=0.3, neg_margin=1.1),
    samplers.HDCSampler(filter_percentage=0.3),
]
IDS = [repr(s) for s in ALL]
JIT = [s for i, s in enumerate(ALL) if i not in (3, 6)]  # variants of the same code paths: once
DYNAMIC = [ALL[1], ALL[2], ALL[5], ALL[7], ALL[9], ALL[10], ALL[14]]  # the samplers with searches, draws, sorts or scatters


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(7)
    y = rng.integers(0, 4, size=16).astype(np.int32)
    x = rng.normal(size=(16, EMBEDDING_DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    d = np.linalg.norm(x[:, None] - x[None], axis=-1).astype(np.float32)
    cand = masks.candidate_mask(y, rng.integers(0, 2, size=16)).numpy()
    return d, y, cand


@pytest.mark.parametrize("sampler", JIT, ids=[repr(s) for s in JIT])
def test_jit_compile_equals_eager(sampler, batch):
    d, y, cand = batch
    if sampler.kind == "sets":
        d = 1.0 - d  # scores, larger = closer
    seed = tf.constant([11, 5], tf.int32)

    def run(d, y, cand, seed):
        return tuple(sampler(d, y, cand, seed=seed, embedding_dim=EMBEDDING_DIM))

    eager = run(d, y, cand, seed)
    compiled = tf.function(run, jit_compile=True)(d, y, cand, seed)
    for e, c in zip(eager, compiled):
        np.testing.assert_array_equal(e.numpy(), c.numpy())
    if sampler not in DYNAMIC:
        return
    # also with a batch size unknown at trace time (the search runs as a while loop)
    spec = (tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None, None], tf.bool), tf.TensorSpec([2], tf.int32))
    dynamic = tf.function(run, input_signature=spec, jit_compile=True)(d, y, cand, seed)
    for e, c in zip(eager, dynamic):
        np.testing.assert_array_equal(e.numpy(), c.numpy())


@pytest.mark.parametrize("sampler", ALL, ids=IDS)
def test_config_round_trip(sampler):
    clone = type(sampler).from_config(sampler.get_config())
    assert clone.get_config() == sampler.get_config()
    assert clone == sampler
    config = keras.saving.serialize_keras_object(sampler)
    assert config["registered_name"] == f"tfdml>{type(sampler).__name__}"
    restored = keras.saving.deserialize_keras_object(config)
    assert type(restored) is type(sampler) and restored.get_config() == sampler.get_config()
    assert samplers.get(config) == sampler


@pytest.mark.parametrize("sampler", ALL, ids=IDS)
def test_selection_type_matches_kind(sampler, batch):
    d, y, cand = batch
    sel = sampler(d, y, cand, seed=[1, 2], embedding_dim=EMBEDDING_DIM)
    b = len(y)
    if sampler.kind == "pairs":
        assert isinstance(sel, samplers.PairSelection)
        for w in sel:
            assert w.shape == (b, b) and w.dtype == tf.float32
            assert np.all(np.diag(w.numpy()) == 0) and np.all(w.numpy()[~cand] == 0)
    elif sampler.kind == "triplets":
        assert isinstance(sel, samplers.TripletSelection)
        assert sel.anchor.dtype == tf.int32 and sel.mask.dtype == tf.bool
        m = sel.mask.numpy()
        a, p, n = sel.anchor.numpy()[m], sel.positive.numpy()[m], sel.negative.numpy()[m]
        assert np.all(cand[a, p]) and np.all(cand[a, n])
        assert np.all(y[a] == y[p]) and np.all(y[a] != y[n])
    else:
        assert isinstance(sel, samplers.SetSelection)
        same = y[:, None] == y[None]
        assert sel.positive.dtype == tf.bool
        assert not np.any(sel.positive.numpy() & ~(cand & same))
        assert not np.any(sel.negative.numpy() & ~(cand & ~same))


def test_get_names_and_errors():
    assert tuple(samplers.SAMPLERS) == ("all", "random", "random_triplets", "semi_hard", "hard",
                                       "distance_weighted", "top_k", "multi_similarity", "easy_hard",
                                       "pair_margin", "npair", "hdc")
    for name in samplers.SAMPLERS:
        assert isinstance(samplers.get(name), samplers.Sampler)
    assert samplers.get("semi_hard") == samplers.SemiHardSampler()
    assert samplers.get({"name": "semi_hard", "fallback": "drop"}) == samplers.SemiHardSampler("drop")
    s = samplers.HardSampler()
    assert samplers.get(s) is s and samplers.get(None) is None
    with pytest.raises(ValueError, match="semi_hard"):
        samplers.get("semihard")
    with pytest.raises(ValueError, match="Cannot build"):
        samplers.get(3)


def test_bad_matrix_shape():
    with pytest.raises(ValueError, match=r"\[B, M\] matrix of B anchors against M >= B"):
        samplers.HardSampler()(np.zeros((4, 3), np.float32), [0, 0, 1])
    with pytest.raises(ValueError, match=r"one label per candidate column: got 3 labels"):
        samplers.HardSampler()(np.zeros((3, 4), np.float32), [0, 0, 1])


@pytest.mark.parametrize("n", [1, 2, 3, 8, 31, 64, 100])
def test_count_less_equal_equals_searchsorted_right(n):
    rng = np.random.default_rng(n)
    rows = np.sort(np.round(rng.uniform(size=(5, n)), 1), axis=1).astype(np.float32)  # with ties
    values = np.round(rng.uniform(-0.1, 1.1, size=(5, 7)), 1).astype(np.float32)
    ref = np.stack([np.searchsorted(r, v, side="right") for r, v in zip(rows, values)])
    np.testing.assert_array_equal(chosen.count_less_equal(rows, values).numpy(), ref)
    spec = [tf.TensorSpec([None, None], tf.float32)] * 2
    for jit in (False, True) if n in (1, 64) else (False,):
        dynamic = tf.function(chosen.count_less_equal, input_signature=spec, jit_compile=jit)
        np.testing.assert_array_equal(dynamic(rows, values).numpy(), ref)


@pytest.mark.parametrize("n", [1, 5, 64, 65, 200])
def test_running_count_equals_numpy_cumsum(n):
    """tfdml.kernels.chosen.running_count: the blocked cumsum equals np.cumsum exactly, whatever n
    against the block (64), with a dense row (counts past one block) and an empty one."""
    rng = np.random.default_rng(n)
    mask = (rng.uniform(size=(6, n)) < 0.3).astype(np.int32)
    mask[0] = 1
    mask[1] = 0
    ref = np.cumsum(mask, axis=1)
    np.testing.assert_array_equal(chosen.running_count(mask).numpy(), ref)
    spec = [tf.TensorSpec([None, None], tf.int32)]
    for jit in (False, True):
        dynamic = tf.function(chosen.running_count, input_signature=spec, jit_compile=jit)
        np.testing.assert_array_equal(dynamic(mask).numpy(), ref)


def test_row_helpers():
    rng = np.random.default_rng(0)
    order = np.argsort(rng.uniform(size=(4, 9)), axis=1).astype(np.int32)
    inverse = primitives.invert_permutation_rows(order).numpy()
    np.testing.assert_array_equal(inverse, np.argsort(order, axis=1))
    params = rng.normal(size=(4, 9)).astype(np.float32)
    idx = rng.integers(0, 9, size=(4, 5)).astype(np.int32)
    np.testing.assert_array_equal(primitives.gather_rows(params, idx).numpy(), np.take_along_axis(params, idx, 1))


@pytest.mark.parametrize("jit", [False, True])
def test_first_argmin_and_argmax_match_tf_on_ties_infinities_and_signed_zeros(jit):
    """tfdml.kernels.chosen.first_argmin / first_argmax: two reductions under XLA, tf.argmin /
    tf.argmax otherwise; lowest index on ties in both modes (NumPy's rule too)."""
    rng = np.random.default_rng(0)
    values = rng.integers(0, 4, size=(5, 3, 17)).astype(np.float32)  # many ties
    values[0, 0] = np.inf  # a row of +inf
    values[1, 1] = -np.inf  # a row of -inf
    values[2, 2, :4] = [0.0, -0.0, 0.0, -0.0]
    values[2, 2, 4:] = 1.0  # minimum 0 tied between +0.0 and -0.0
    values[3, 0, 5] = -np.inf
    values[3, 1, 7] = np.inf
    fn = tf.function(
        lambda v: [chosen.first_argmin(v, axis=a) for a in (0, 1, 2)]
        + [chosen.first_argmax(v, axis=a) for a in (0, 1, -1)],
        jit_compile=jit,
    )
    got = [g.numpy() for g in fn(tf.constant(values))]
    want = [np.argmin(values, axis=a) for a in (0, 1, 2)] + [np.argmax(values, axis=a) for a in (0, 1, -1)]
    for g, w in zip(got, want):
        assert g.dtype == np.int32
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("sampler", ALL, ids=IDS)
def test_a_grid_selection_holds_pair_a_p_at_slot_a_times_b_plus_p(sampler, batch):
    """The losses read D_ap of a GridTripletSelection as the matrix itself, without a
    gather: that is right only if slot a·B + p really is (a, p)."""
    d, y, cand = batch
    selection = sampler(d, y, cand, seed=tf.constant([3, 4], tf.int32), embedding_dim=EMBEDDING_DIM)
    if not isinstance(selection, samplers.GridTripletSelection):
        return
    size = len(y)
    np.testing.assert_array_equal(selection.anchor.numpy(), np.repeat(np.arange(size), size))
    np.testing.assert_array_equal(selection.positive.numpy(), np.tile(np.arange(size), size))


def test_semi_hard_and_distance_weighted_return_grid_selections(batch):
    d, y, cand = batch
    for sampler in (samplers.SemiHardSampler(), samplers.DistanceWeightedSampler()):
        selection = sampler(d, y, cand, seed=tf.constant([1, 2], tf.int32), embedding_dim=EMBEDDING_DIM)
        assert isinstance(selection, samplers.GridTripletSelection)


@pytest.mark.parametrize("jit", [False, True])
def test_compact_grid_lists_each_anchors_valid_slots_in_order(jit):
    """samplers.base.compact_grid: anchor a's k-th valid column of a grid selection, the
    negative of that slot, and the largest count of valid slots (NumPy reference)."""
    rng = np.random.default_rng(3)
    size, width = 12, 4
    mask = rng.random((size, size)) < 0.25
    mask[5] = False  # an anchor without a valid slot
    negative = rng.integers(0, size, (size, size)).astype(np.int32)
    rows = np.arange(size, dtype=np.int32)
    grid = samplers.GridTripletSelection(np.repeat(rows, size), np.tile(rows, size),
                                         negative.reshape(-1), mask.reshape(-1))
    narrow, widest = tf.function(lambda g: samplers.base.compact_grid(g, width), jit_compile=jit)(
        tf.nest.map_structure(tf.constant, grid))
    assert int(widest) == mask.sum(axis=1).max()
    anchor, positive, neg, valid = (t.numpy().reshape(size, width) for t in narrow)
    for a in range(size):
        columns = np.flatnonzero(mask[a])[:width]
        n = len(columns)
        np.testing.assert_array_equal(valid[a], np.arange(width) < n)
        np.testing.assert_array_equal(anchor[a], a)
        np.testing.assert_array_equal(positive[a, :n], columns)
        np.testing.assert_array_equal(neg[a, :n], negative[a, columns])
