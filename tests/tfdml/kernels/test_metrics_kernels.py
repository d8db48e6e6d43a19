"""Kernels of the retrieval metrics: every fast form equals its reference path.

``count_at_least`` (reference: comparisons summed; fast: XLA's variadic
reduction, tfdml.kernels.counting) and the counts of a chunk of queries
(reference: tfdml.metrics.retrieval.chunk_counts; fast: "counting" and
"sorting", tfdml.kernels.retrieval), on random and adversarial inputs, in graph
mode and under XLA; and which form the table chooses where.
"""

import numpy as np
import pytest
import tensorflow as tf

from tfdml import kernels, primitives
from tfdml.kernels import chosen, counting
from tfdml.kernels import retrieval as fast
from tfdml.metrics import knn, retrieval

JIT = {"graph": False, "xla": True}


def _ops(fn, *args):
    return [op.type for op in fn.get_concrete_function(*args).graph.get_operations()]


# ---- count_at_least -------------------------------------------------------------------------


def _numpy_count(values, thresholds):
    return np.sum(values[:, None, :] >= thresholds[:, :, None], axis=2)


def _values_and_thresholds(rows, n, width, seed=0):
    rng = np.random.default_rng(seed)
    values = np.round(rng.standard_normal((rows, n)), 1).astype(np.float32)  # ties
    thresholds = values[np.arange(rows)[:, None], rng.integers(0, n, (rows, width))]
    thresholds[:, ::3] = np.round(rng.standard_normal((rows, len(range(0, width, 3)))), 1)
    return values, thresholds


def _count(form, mode, values, thresholds, signature=None):
    """count_at_least with ``form`` forced, traced afresh in ``mode``."""
    with kernels.forced(form):
        fn = tf.function(chosen.count_at_least, jit_compile=JIT[mode], input_signature=signature)
        return fn(tf.constant(values), tf.constant(thresholds)).numpy()


EDGE_VALUES = np.array([[-0.0, 0.0, 1.0, -np.inf, np.inf, np.nan, 3e38, -3e38],
                        [2.0, 2.0, 2.0, 1.0, np.nan, -1.0, 1e-30, -1e-30]], np.float32)
EDGE_THRESHOLDS = np.array([[0.0, -0.0, np.inf, -np.inf, np.nan, 3e38],
                            [2.0, np.inf, -np.inf, 1e-30, -0.0, -1e-30]], np.float32)


@pytest.mark.parametrize("mode", JIT)
@pytest.mark.parametrize("case", ["ties", "edges"])
def test_count_at_least_forms_equal_the_reference(mode, case):
    """±0 are equal, ±inf thresholds reach all or none, a NaN value reaches nothing and
    a NaN threshold is reached by nothing; widths around the group of 64."""
    cases = ([_values_and_thresholds(5, 97, width, seed=width) for width in (1, 5, 64, 65)]
             if case == "ties" else [(EDGE_VALUES, EDGE_THRESHOLDS)])
    for values, thresholds in cases:
        expected = _numpy_count(values, thresholds)
        np.testing.assert_array_equal(_count("reference", mode, values, thresholds), expected)
        np.testing.assert_array_equal(_count("variadic_reduce", mode, values, thresholds), expected)
    if case == "edges":
        np.testing.assert_array_equal(expected, [[5, 5, 1, 7, 0, 2], [3, 0, 7, 5, 5, 6]])


@pytest.mark.parametrize("group", [1, 4])
def test_variadic_count_by_groups_equals_the_reference(group):
    values, thresholds = _values_and_thresholds(4, 33, 9, seed=group)
    fn = tf.function(lambda v, t: counting.count_at_least(v, t, group), jit_compile=True)
    np.testing.assert_array_equal(fn(tf.constant(values), tf.constant(thresholds)).numpy(),
                                  _numpy_count(values, thresholds))


def test_variadic_count_is_one_reduction_per_group_under_xla_only():
    values, thresholds = _values_and_thresholds(3, 50, 65)
    args = (tf.constant(values), tf.constant(thresholds))
    with kernels.forced("variadic_reduce"):
        assert _ops(tf.function(chosen.count_at_least, jit_compile=True), *args).count("XlaVariadicReduceV2") == 2
        assert "XlaVariadicReduceV2" not in _ops(tf.function(chosen.count_at_least), *args)
    with kernels.forced("reference"):
        assert "XlaVariadicReduceV2" not in _ops(tf.function(chosen.count_at_least, jit_compile=True), *args)


def test_count_at_least_without_the_xla_op(monkeypatch):
    """A TensorFlow without tf2xla's Python ops: the reference, same counts."""
    monkeypatch.setattr(counting, "_tf2xla", None)
    values, thresholds = _values_and_thresholds(4, 80, 9)
    with kernels.forced("variadic_reduce"):
        fn = tf.function(chosen.count_at_least, jit_compile=True)
        args = (tf.constant(values), tf.constant(thresholds))
        assert "XlaVariadicReduceV2" not in _ops(fn, *args)
        np.testing.assert_array_equal(fn(*args).numpy(), _numpy_count(values, thresholds))


@pytest.mark.parametrize("mode", JIT)
def test_count_at_least_unknown_shapes(mode):
    values, thresholds = _values_and_thresholds(5, 33, 3)
    expected = _numpy_count(values, thresholds)
    rows_unknown = [tf.TensorSpec([None, None]), tf.TensorSpec([None, 3])]
    all_unknown = [tf.TensorSpec([None, None]), tf.TensorSpec([None, None])]
    for form in ("reference", "variadic_reduce"):
        for signature in (rows_unknown, all_unknown):  # unknown width: the reference
            np.testing.assert_array_equal(_count(form, mode, values, thresholds, signature), expected)
    assert chosen.count_at_least(tf.zeros([3, 4]), tf.zeros([3, 0])).shape == (3, 0)


def test_variadic_count_outside_xla_is_a_clear_error():
    with pytest.raises(ValueError, match="only under XLA"):
        counting.count_at_least(tf.zeros([2, 3]), tf.zeros([2, 1]), 64)


# ---- the counts of a chunk of queries -------------------------------------------------------


def _embeddings(case, n=19):
    """Embeddings whose scores are exact in float32 whatever the order of the sums: small
    integers, or one nonzero coordinate per row (a dot product then has at most one term),
    so every form and mode ranks on the same numbers, and ties are exact ties."""
    rng = np.random.default_rng(7)
    x = rng.integers(-3, 4, (n, 3)).astype(np.float32)
    labels = rng.integers(0, 4, n)
    if case == "ties":  # many equal distances, duplicates within and across classes
        x = rng.integers(-1, 2, (n, 3)).astype(np.float32)
    elif case == "signed_zeros":
        x = rng.choice(np.array([0.0, -0.0, 1.0], np.float32), (n, 3))
    elif case == "extremes":  # huge, tiny and plain rows: huge-to-tiny scores tie
        scale = np.float32([2.0**56, 2.0**-50, 1.0])[np.arange(n) % 3]
        x = np.zeros((n, 3), np.float32)
        x[np.arange(n), np.arange(n) % 3] = rng.integers(-3, 4, n) * scale
    elif case == "one_class":
        labels = np.zeros(n, np.int64)
    elif case == "all_distinct":  # every query a singleton: no positives
        labels = np.arange(n)
    return x, labels


def _chunk_inputs(case, leave_one_out=True):
    """The arguments of a chunk's counts for all queries of ``case``, built as
    positive_ranks builds them (the embeddings taken as already in the ranking frame)."""
    x, labels = _embeddings(case)
    if leave_one_out:
        q_ids, g_ids = retrieval.encode_labels(labels)[0], None
        query, gallery, g_ids = x, x, q_ids
    else:
        q_ids, g_ids = retrieval.encode_labels(labels[:7], labels[7:])
        query, gallery = x[:7], x[7:]
    table = retrieval._positive_table(g_ids, int(max(q_ids.max(), g_ids.max())) + 1)
    g, g_norms = knn.gallery_tensors(gallery)
    self_index = knn.self_indices(0, query.shape[0], leave_one_out)
    idx = table[q_ids]
    idx = np.where(idx == self_index[:, None], -1, idx)
    return tf.constant(query), g, g_norms, tf.constant(idx, tf.int32), tf.constant(self_index)


def _numpy_chunk_counts(args):
    """at_least from the definition: items other than the query scoring >= each threshold."""
    query, gallery, g_norms, idx, self_index = args
    s = primitives.scores(query, gallery, g_norms).numpy()
    thr, _ = primitives.positive_thresholds(tf.constant(s), idx)
    thr = thr.numpy()
    not_self = np.arange(s.shape[1])[None, :] != self_index.numpy()[:, None]
    return np.sum((s[:, None, :] >= thr[:, :, None]) & not_self[:, None, :], axis=2)


def _chunk(form, mode, args, unknown_batch=False):
    """``(at_least, thr, num_pos)`` as NumPy from ``form`` ("reference", "counting"), traced afresh."""
    fn = {"reference": retrieval.chunk_counts, "counting": fast.count_chunk}[form]
    signature = None
    if unknown_batch:
        signature = [tf.TensorSpec([None, args[0].shape[1]]), tf.TensorSpec(args[1].shape),
                     tf.TensorSpec(args[2].shape), tf.TensorSpec([None, args[3].shape[1]], tf.int32),
                     tf.TensorSpec([None], tf.int32)]
    # The counting form counts with count_at_least's fast form where it can run (XLA).
    with kernels.forced("reference" if form == "reference" else "variadic_reduce"):
        out = tf.function(fn, jit_compile=JIT[mode], input_signature=signature)(*args)
    return [np.asarray(t) for t in out]


CASES = ["random", "ties", "signed_zeros", "extremes", "one_class", "all_distinct"]


@pytest.mark.parametrize("mode", JIT)
@pytest.mark.parametrize("case", CASES)
def test_chunk_count_forms_equal_the_reference(mode, case):
    for leave_one_out in (True, False):
        args = _chunk_inputs(case, leave_one_out)
        reference = _chunk("reference", mode, args)
        np.testing.assert_array_equal(reference[0], _numpy_chunk_counts(args))
        for got in (_chunk("counting", mode, args), fast.at_least_by_sorting(*args)):
            for r, g in zip(reference, got):
                np.testing.assert_array_equal(g, r)


@pytest.mark.parametrize("mode", JIT)
def test_chunk_count_forms_with_an_unknown_batch_dimension(mode):
    args = _chunk_inputs("ties")
    reference = _chunk("reference", mode, args)
    for form in ("reference", "counting"):
        for r, g in zip(reference, _chunk(form, mode, args, unknown_batch=True)):
            np.testing.assert_array_equal(g, r)


def test_metrics_are_the_same_whichever_form_counts():
    """End to end: the CPU table's choice, and each form forced (query/gallery, chunks of 5).
    The gallery is symmetric about 0, so centring it changes no number."""
    x, labels = _embeddings("ties", 13)
    gallery = np.concatenate([x[4:], -x[4:], x[:2]])
    gallery = np.concatenate([gallery, -gallery])  # duplicates of queries, mean exactly 0
    gallery_labels = np.tile(np.concatenate([labels[4:], labels[4:], labels[:2]]), 2)
    args = (x[:4], labels[:4], gallery, gallery_labels)
    kwargs = dict(metrics=retrieval.RANK_METRICS, ks=(1, 3), chunk_size=3, per_class=True)
    expected = retrieval.retrieval_metrics(*args, **kwargs)
    assert expected["num_queries"] == 4
    for form in ("reference", "counting", "sorting"):
        with kernels.forced(form):
            got = retrieval.retrieval_metrics(*args, **kwargs)
        for key, value in expected.items():
            if key == "per_class":
                for column, values in value.items():
                    np.testing.assert_array_equal(got[key][column], values)
            else:
                assert got[key] == value, (form, key)


# ---- the table --------------------------------------------------------------------------------


def test_cpu_counts_up_to_64_positives_or_256_on_large_evaluations():
    """The CPU choice of the chunk counts: counting, else sorting, by its crossovers."""
    for mode in kernels.MODES:
        choice = kernels.choose("positive_counts", mode=mode, device="CPU")
        assert choice.form == "count_or_sort"

        def form(positives, pairs, params=choice.params):
            return fast.count_or_sort(positives, pairs, **params)

        large = choice.params["large_from_pairs"]
        assert form(1, 1) == form(64, 1) == "counting"
        assert form(65, large - 1) == "sorting"
        assert form(65, large) == form(256, large) == "counting"
        assert form(257, 2**40) == "sorting"
    assert kernels.choose("count_at_least", mode="xla", device="CPU") == kernels.Choice("variadic_reduce", {"group": 64})
    assert kernels.choose("count_at_least", mode="graph", device="CPU").is_reference


def test_chunk_counter_picks_the_forms_function():
    with kernels.forced("reference"):
        assert retrieval.chunk_counter(1, 1) is retrieval.chunk_counts_xla
    with kernels.forced("sorting"):
        assert retrieval.chunk_counter(1, 1) is fast.at_least_by_sorting
    with kernels.forced("counting"):
        assert retrieval.chunk_counter(10**6, 1) is fast.at_least_by_counting


@pytest.mark.parametrize("device", ["GPU", "TPU"])
def test_other_devices_run_the_reference(device):
    for name in ("count_at_least", "positive_counts"):
        for mode in kernels.MODES:
            assert kernels.choose(name, mode=mode, device=device).is_reference
