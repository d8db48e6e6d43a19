"""Every path of the semi-hard sampler (compare with each width, the compare loop, the
sort) against the brute-force NumPy reference, in graph mode, under XLA and with an
unknown batch dimension; ties (quantised distances) and both fallbacks."""

import importlib.util
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from tfdml import kernels, losses, masks, samplers
from tfdml.kernels import semi_hard

# The CPU table's parameters of the fast form (the paths this file exercises).
_CPU = kernels.CHOICES["CPU"]["semi_hard"]
WIDTHS = _CPU["graph"].params["widths"]
SORT_ABOVE, SORT_ABOVE_XLA = _CPU["graph"].params["sort_above"], _CPU["xla"].params["sort_above"]

# The brute-force reference of test_semi_hard_and_hard.py (loaded by path: tests are no package).
_spec = importlib.util.spec_from_file_location(
    "_semi_hard_reference", pathlib.Path(__file__).with_name("test_semi_hard_and_hard.py")
)
_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_reference)
_brute_semi_hard = _reference._brute_semi_hard

SORT = len(WIDTHS)


# (name, class sizes): P = the largest class size - 1 picks the path in each mode
LAYOUTS = [
    ("singletons", [1] * 9),  # no positives at all: P = 0
    ("pairs", [2] * 6 + [1]),  # P = 1
    ("threes", [3, 3, 3, 2, 1]),  # P = 2
    ("fours", [4] * 5),  # P = 3, the usual m = 4 batch
    ("fives", [5, 5, 2, 4]),  # P = 4
    ("one_big", [12, 2, 3, 1, 4]),  # P = 11: the loop, several steps
    # SORT_ABOVE < P <= SORT_ABOVE_XLA: graph mode sorts, XLA compares
    ("many_positives", [SORT_ABOVE + 2, 3, 2, 4]),
    ("very_many", [SORT_ABOVE_XLA + 2, 3, 2, 4]),  # P > both: sort
]


def _path(sizes, mode):
    """The branch of ``semi_hard.plan`` for these class sizes in ``mode``: the first width
    holding P (the last one loops), or the sort after the widths."""
    params = _CPU["xla" if mode == "xla" else "graph"].params
    widths, others = params["widths"], max(sizes) - 1
    if others > params["sort_above"]:
        return len(widths)
    return next((i for i, width in enumerate(widths) if others <= width), len(widths) - 1)


def _batch(sizes, seed, ties):
    rng = np.random.default_rng(seed)
    y = np.repeat(rng.permutation(100)[: len(sizes)], sizes).astype(np.int32)
    perm = rng.permutation(len(y))  # classes interleaved, not in runs
    y = y[perm]
    if ties:  # quantised distances: many ties, the strict '>' and the lower-index rule
        d = np.round(rng.uniform(0.0, 2.0, size=(len(y), len(y))), 1)
    else:
        x = rng.normal(size=(len(y), 5))
        d = np.linalg.norm(x[:, None] - x[None], axis=-1)
    return d.astype(np.float32), y


FALLBACKS = ("hardest_inside", "drop")


def _both(d, y, c):
    return [samplers.SemiHardSampler(fallback)(d, y, c) for fallback in FALLBACKS]


def _runner(mode):
    """Both fallbacks' selections, eagerly or as one tf.function (one trace per shape)."""
    if mode == "eager":
        return _both
    kwargs = {"jit_compile": mode == "xla"}
    if mode == "unknown_batch":
        kwargs["input_signature"] = [
            tf.TensorSpec([None, None], tf.float32),
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None, None], tf.bool),
        ]
    return tf.function(_both, **kwargs)


def _check(sel, d, y, cand, fallback):
    ref_neg, ref_valid = _brute_semi_hard(d, y, cand, fallback)
    b = len(y)
    np.testing.assert_array_equal(sel.anchor.numpy(), np.repeat(np.arange(b), b))
    np.testing.assert_array_equal(sel.positive.numpy(), np.tile(np.arange(b), b))
    np.testing.assert_array_equal(sel.mask.numpy(), ref_valid)
    np.testing.assert_array_equal(sel.negative.numpy()[ref_valid], ref_neg[ref_valid])
    negative = sel.negative.numpy()
    assert np.all((negative >= 0) & (negative < b))


#: Compiled variants run by default for one layout per path (each XLA compile of a new
#: batch shape costs seconds); the others are marked slow (TFDML_SLOW=1 runs them).
_DEFAULT_COMPILED = {"xla": ("fours", "one_big", "very_many"),
                     "unknown_batch": ("fours", "many_positives")}


def _path_cases():
    for mode in ("graph", "xla", "unknown_batch"):
        for name, sizes in LAYOUTS:
            slow = mode != "graph" and name not in _DEFAULT_COMPILED[mode]
            path = _path(sizes, mode)
            yield pytest.param(name, sizes, path, mode, id=f"{name}-{mode}",
                               marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("name,sizes,path,mode", list(_path_cases()))
def test_each_path_matches_brute_force(name, sizes, path, mode):
    run = _runner(mode)
    for seed, ties in ((0, True), (1, False)):  # the second batch also restricts pairs by pair_id
        d, y = _batch(sizes, seed, ties)
        cand = masks.candidate_mask(y, np.arange(len(y)) % 3 if seed else None).numpy()
        assert int(semi_hard.plan(y, compiled=mode == "xla")) == path
        for fallback, sel in zip(FALLBACKS, run(d, y, cand)):
            _check(sel, d, y, cand, fallback)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_plan_follows_the_mode_being_traced(jit):
    # P = SORT_ABOVE + 1: the sampler traced in graph mode sorts, traced for XLA compares.
    sizes = [SORT_ABOVE + 2, 3, 2, 4]
    _, y = _batch(sizes, 0, ties=True)
    expected = _path(sizes, "xla" if jit else "graph")
    assert int(tf.function(semi_hard.plan, jit_compile=jit)(y)) == expected
    assert int(semi_hard.plan(y)) == SORT  # eagerly: graph mode's threshold


def _forced(sort_above, fn, *args):
    """``fn(*args)`` traced with both sort thresholds at ``sort_above`` (-1: always sort)."""
    saved = dict(_CPU)
    for mode in kernels.MODES:
        _CPU[mode] = kernels.Choice("compare_or_sort", {"widths": WIDTHS, "sort_above": sort_above})
    try:
        return fn(*args)
    finally:
        _CPU.update(saved)


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_compare_and_sort_paths_give_the_same_selection(mode):
    # The same batch through both paths: every slot equal, invalid ones included.
    d, y = _batch([7, 4, 4, 3, 3, 1], 3, ties=True)
    cand = masks.candidate_mask(y).numpy()
    by_compare = _forced(10**9, _runner(mode), d, y, cand)
    by_sort = _forced(-1, _runner(mode), d, y, cand)
    for fallback, compared, sorted_ in zip(FALLBACKS, by_compare, by_sort):
        for a, b in zip(compared, sorted_):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        _check(compared, d, y, cand, fallback)


def test_labels_that_are_not_integers_take_the_sort_path():
    d, y = _batch([4, 4, 3, 2], 4, ties=True)
    assert int(semi_hard.plan(y.astype(np.float32))) == SORT
    cand = masks.candidate_mask(y).numpy()
    _check(samplers.SemiHardSampler()(d, y.astype(np.float32), cand), d, y, cand, "hardest_inside")


def test_int64_and_negative_labels():
    d, y = _batch([4, 3, 4, 1], 5, ties=True)
    y = (y.astype(np.int64) - 50) * (1 << 40)  # negative, beyond int32
    cand = masks.candidate_mask(y).numpy()
    assert int(semi_hard.plan(y)) == 2
    for fallback in ("hardest_inside", "drop"):
        _check(samplers.SemiHardSampler(fallback)(d, y, cand), d, y, cand, fallback)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_triplet_loss_unknown_batch_dim_same_on_both_paths(jit):
    # Through the loss with a [None, d] input signature: the value and the gradient are the
    # same bit for bit whichever path selects (graph mode and XLA differ in the last bits of
    # the loss arithmetic itself, so each is compared with itself).
    _, y = _batch([4] * 6 + [3, 2], 6, ties=False)
    rng = np.random.default_rng(6)
    e = rng.normal(size=(len(y), 8)).astype(np.float32)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    loss = losses.TripletLoss()
    spec = [tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, 8], tf.float32)]

    def step(y, e):
        with tf.GradientTape() as tape:
            tape.watch(e)
            value = loss(y, e)
        return value, tape.gradient(value, e)

    by_compare = _forced(10**9, tf.function(step, input_signature=spec, jit_compile=jit), y, e)
    by_sort = _forced(-1, tf.function(step, input_signature=spec, jit_compile=jit), y, e)
    assert by_compare[0].numpy() > 0
    np.testing.assert_array_equal(by_compare[0].numpy(), by_sort[0].numpy())
    np.testing.assert_array_equal(by_compare[1].numpy(), by_sort[1].numpy())


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_flat_gather_pairs_equals_gather_nd_with_its_gradient(jit):
    # losses.triplet.gather_pairs gathers from the flattened matrix (faster gradient on CPU):
    # same values and same gradient, bit for bit, as tf.gather_nd, repeated pairs included.
    from tfdml.losses.triplet import gather_pairs

    rng = np.random.default_rng(8)
    m = tf.constant(rng.normal(size=(9, 9)).astype(np.float32))
    rows = tf.constant(rng.integers(0, 9, size=200).astype(np.int32))
    cols = tf.constant(rng.integers(0, 9, size=200).astype(np.int32))
    w = tf.constant(rng.normal(size=200).astype(np.float32))

    def both(m):
        out = []
        for gather in (gather_pairs, lambda m, r, c: tf.gather_nd(m, tf.stack([r, c], axis=1))):
            with tf.GradientTape() as tape:
                tape.watch(m)
                values = gather(m, rows, cols)
                total = tf.reduce_sum(w * tf.square(values))
            out.append((values, tape.gradient(total, m)))
        return out

    (v1, g1), (v2, g2) = tf.function(both, jit_compile=jit)(m)
    np.testing.assert_array_equal(v1.numpy(), v2.numpy())
    np.testing.assert_array_equal(g1.numpy(), g2.numpy())


def test_sort_path_ranks_minus_zero_and_zero_as_a_tie_under_xla():
    """XLA's CPU sort orders −0.0 before +0.0 where TensorFlow's kernel sees a tie: the
    sort path must select the same negatives with and without jit_compile (and as the
    brute-force reference, which compares values) when both zeros occur."""
    d, y = _batch([7, 4, 4, 3, 3, 1], 7, ties=True)
    rng = np.random.default_rng(7)
    zeros = rng.random(d.shape) < 0.15
    d[zeros] = np.where(rng.random(zeros.sum()) < 0.5, np.float32(-0.0), np.float32(0.0))
    cand = masks.candidate_mask(y).numpy()
    for mode in ("eager", "xla"):
        for fallback, sel in zip(FALLBACKS, _forced(-1, _runner(mode), d, y, cand)):
            _check(sel, d, y, cand, fallback)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_class_layout_matches_a_sorted_search(dtype, jit):
    # Each class's run in the stable label order: its start (labels below) and its size
    # (labels equal), against NumPy's searchsorted; the dtype's least and largest labels
    # included (label − 1 wraps at the least).
    info = np.iinfo(dtype)
    rng = np.random.default_rng(6)
    labels = np.concatenate([[info.min, 3, info.max, info.min, -1, 0], rng.integers(-3, 4, 40)]).astype(dtype)
    order, where, start, count = (t.numpy() for t in tf.function(semi_hard._class_layout, jit_compile=jit)(labels))
    ranked = np.sort(labels, kind="stable")
    np.testing.assert_array_equal(order, np.argsort(labels, kind="stable"))
    np.testing.assert_array_equal(where[order], np.arange(len(labels)))
    np.testing.assert_array_equal(start, np.searchsorted(ranked, labels, side="left"))
    np.testing.assert_array_equal(count, np.searchsorted(ranked, labels, side="right") - start)
