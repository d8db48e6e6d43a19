"""The samplers' kernels: every fast form of tfdml.kernels' "samplers" block, forced, gives
exactly what the reference path gives, forced, on random and adversarial inputs (ties,
−0.0 / +0.0, huge and tiny finite values, one class, all-distinct classes), in graph mode
and under XLA, with static and unknown shapes; the table's CPU entries name forms that
exist, and a GPU or TPU runs the reference path."""

import numpy as np
import pytest
import tensorflow as tf

from tfdml import kernels, losses, masks, samplers
from tfdml import targets as targets_lib
from tfdml.kernels import argmin, binary_search, chosen, distance_weighted, running_count, semi_hard, sorting, top_k, triplet_slots
from tfdml.losses import batch as losses_batch
from tfdml.samplers import distance_weighted as dw_sampler
from tfdml.samplers import semi_hard as semi_hard_sampler

#: kernel name -> the module holding its fast forms
MODULES = {
    "first_argmin": argmin,
    "count_less_equal": binary_search,
    "running_count": running_count,
    "ordering": sorting,
    "semi_hard": semi_hard,
    "top_k": top_k,
    "distance_weighted": distance_weighted,
    "triplet_slots": triplet_slots,
}
#: (mode, unknown shapes)
MODES = [("graph", False), ("xla", False), ("graph", True), ("xla", True)]
MODE_IDS = ["graph", "xla", "graph-unknown", "xla-unknown"]

HUGE = np.float32(3.0e38)
TINY = np.float32(1.0e-37)  # finite and normal: XLA on CPU may flush subnormals to zero

_compiled = {}


def _run(fn, args, specs, form, mode, unknown, key):
    """``fn(*args)`` as NumPy, traced inside ``kernels.forced(form)`` (every call too, so a
    retrace for a new shape sees the same form). Compiled functions are shared by key."""
    cache_key = (key, form, mode, unknown)
    if cache_key not in _compiled:
        _compiled[cache_key] = tf.function(
            fn, jit_compile=mode == "xla", input_signature=specs if unknown else None, reduce_retracing=False
        )
    with kernels.forced(form):
        out = _compiled[cache_key](*args)
    return tf.nest.map_structure(lambda t: t.numpy(), out)


def _both(fn, args, specs, form, mode, unknown, key):
    """(fast form, reference) results of the same call."""
    return tuple(_run(fn, args, specs, f, mode, unknown, key) for f in (form, kernels.REFERENCE))


def _assert_equal(fast, ref):
    for a, b in zip(tf.nest.flatten(fast), tf.nest.flatten(ref)):
        np.testing.assert_array_equal(a, b)


# --- the table ---------------------------------------------------------------------


def test_every_cpu_entry_names_a_form_of_its_module():
    for name, module in MODULES.items():
        for mode in kernels.MODES:
            choice = kernels.choose(name, mode=mode, device="CPU")
            assert choice.is_reference or choice.form in module.FORMS, (name, mode, choice)


@pytest.mark.parametrize("device", ["GPU", "TPU"])
def test_gpu_and_tpu_run_the_reference_paths(device):
    for name in MODULES:
        for mode in kernels.MODES:
            assert kernels.choose(name, mode=mode, device=device).is_reference, (name, mode)


def test_the_cpu_choices_are_the_measured_ones():
    """The CPU forms and crossovers the samplers used before the table (a change here is a
    change of CPU speed, to be measured: benchmarks/ab_compare.py)."""
    cpu = {(kernel, mode): (form, params) for device, kernel, mode, form, params in kernels.table()
           if device == "CPU" and kernel in MODULES}
    assert cpu == {
        ("first_argmin", "graph"): ("one_pass", {}),
        ("count_less_equal", "graph"): ("unrolled", {}),
        ("running_count", "graph"): ("blocked_matmul", {"block": 64}),
        ("running_count", "xla"): ("blocked_matmul", {"block": 64}),
        ("ordering", "graph"): ("packed_sort", {}),
        ("ordering", "xla"): ("bitonic", {}),
        ("semi_hard", "graph"): ("compare_or_sort", {"widths": (1, 2, 3, 4), "sort_above": 40}),
        ("semi_hard", "xla"): ("compare_or_sort", {"widths": (4,), "sort_above": 64}),
        ("top_k", "graph"): ("prefix", {"up_to": 16}),
        ("top_k", "xla"): ("prefix", {"up_to": 16}),
        ("distance_weighted", "graph"): ("valid_slots", {}),
        ("distance_weighted", "xla"): ("listed_slots", {"width": 16}),
        ("triplet_slots", "graph"): ("valid_slots", {}),
        ("triplet_slots", "xla"): ("listed_slots", {"width": 16}),
    }


def test_on_a_gpu_the_samplers_trace_their_reference_paths(monkeypatch):
    """The samplers ask the table of the device they run on: with a GPU, semi-hard has no
    plan (the reference path) and the row order holds no packed int64 sort."""
    monkeypatch.setattr(kernels, "device_kind", lambda: "GPU")
    assert int(semi_hard.plan(np.array([0, 0, 1, 1]), compiled=False)) == -1
    graph = tf.function(chosen.stable_order).get_concrete_function(tf.TensorSpec([3, 5], tf.float32)).graph
    assert not [op for op in graph.get_operations() if op.type == "BitwiseAnd"]  # no unpacking
    monkeypatch.undo()
    graph = tf.function(chosen.stable_order).get_concrete_function(tf.TensorSpec([3, 5], tf.float32)).graph
    assert [op for op in graph.get_operations() if op.type == "BitwiseAnd"]


# --- first_argmin / first_argmax ----------------------------------------------------


def _argmin_values():
    rng = np.random.default_rng(0)
    values = rng.integers(-2, 3, size=(4, 3, 9)).astype(np.float32)  # many ties
    values[0, 0] = np.inf
    values[0, 1] = -np.inf
    values[1, 0, :4] = [0.0, -0.0, 0.0, -0.0]
    values[1, 0, 4:] = 1.0  # the minimum 0 tied between +0.0 and −0.0
    values[1, 1] = [HUGE, -HUGE, TINY, -TINY, HUGE, -HUGE, 0.0, -0.0, TINY]
    values[2, 2] = -0.0
    values[3] = 7.0  # one value everywhere
    return values


def _argmins(v):
    return ([chosen.first_argmin(v, axis=a) for a in (0, 1, 2)]
            + [chosen.first_argmax(v, axis=a) for a in (0, 1, -1)])


@pytest.mark.parametrize("mode,unknown", MODES, ids=MODE_IDS)
def test_first_argmin_one_pass_equals_reference(mode, unknown):
    values = _argmin_values()
    fast, ref = _both(_argmins, (values,), [tf.TensorSpec([None] * 3, tf.float32)], "one_pass", mode, unknown,
                      "argmin")
    _assert_equal(fast, ref)
    want = [np.argmin(values, axis=a) for a in (0, 1, 2)] + [np.argmax(values, axis=a) for a in (0, 1, -1)]
    _assert_equal(ref, want)  # the reference is NumPy's rule: lowest index on ties


# --- count_less_equal ---------------------------------------------------------------


@pytest.mark.parametrize("mode,unknown", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("n", [1, 2, 64, 100])
def test_count_less_equal_unrolled_equals_the_loop(mode, unknown, n):
    """Written-out steps and the loop give np.searchsorted's counts, with ties, values below
    and above every entry, both sides and chosen rows."""
    rng = np.random.default_rng(n)
    rows = np.sort(np.round(rng.uniform(size=(4, n)), 1), axis=1).astype(np.float32)
    values = np.round(rng.uniform(-0.1, 1.1, size=(4, 6)), 1).astype(np.float32)
    which = rng.integers(0, 4, size=(4, 6)).astype(np.int32)
    spec = [tf.TensorSpec([None, None], tf.float32)] * 2 + [tf.TensorSpec([None, None], tf.int32)]

    def counts(rows, values, which):
        return (chosen.count_less_equal(rows, values), chosen.count_less_equal(rows, values, strict=True),
                chosen.count_less_equal(rows, values, rows=which))

    fast, ref = _both(counts, (rows, values, which), spec, "unrolled", mode, unknown, "count_less_equal")
    _assert_equal(fast, ref)
    want = (np.stack([np.searchsorted(r, v, side="right") for r, v in zip(rows, values)]),
            np.stack([np.searchsorted(r, v, side="left") for r, v in zip(rows, values)]),
            np.stack([[np.searchsorted(rows[w], x, side="right") for w, x in zip(ws, xs)]
                      for ws, xs in zip(which, values)]))
    _assert_equal(ref, want)


# --- running_count ------------------------------------------------------------------


def _masks(n):
    rng = np.random.default_rng(n)
    mask = (rng.random((5, n)) < 0.3).astype(np.int32)
    mask[0] = 1  # counts past a block
    mask[1] = 0
    mask[2, -1:] = 1
    return mask


@pytest.mark.parametrize("mode,unknown", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("n", [1, 64, 130])
def test_running_count_blocked_matmul_equals_cumsum(mode, unknown, n):
    mask = _masks(n)
    fast, ref = _both(chosen.running_count, (mask,), [tf.TensorSpec([None, None], tf.int32)], "blocked_matmul",
                      mode, unknown, "running_count")
    np.testing.assert_array_equal(fast, ref)
    np.testing.assert_array_equal(ref, np.cumsum(mask, axis=1))


# --- ordering -----------------------------------------------------------------------


def _order_keys(rows, cols, seed):
    """Quantised keys (ties) with ±0.0, ±inf, huge and tiny values; ``first`` random."""
    rng = np.random.default_rng(seed)
    keys = np.round(rng.uniform(-1.0, 2.0, size=(rows, cols)) * 4) / 4
    specials = np.array([-0.0, 0.0, np.inf, -np.inf, HUGE, -HUGE, TINY, -TINY], np.float32)
    where = rng.random((rows, cols)) < 0.3
    keys[where] = rng.choice(specials, size=int(where.sum()))
    return keys.astype(np.float32), rng.random((rows, cols)) < 0.5


def _lexsort(keys, first):
    keys = np.asarray(keys, np.float64) + 0.0
    columns = np.arange(keys.shape[1])
    tie = np.where(first, columns, keys.shape[1] + columns)
    return np.stack([np.lexsort((t, k)) for k, t in zip(keys, tie)]).reshape(keys.shape)


@pytest.mark.parametrize("mode,unknown", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("form", sorting.FORMS)
@pytest.mark.parametrize("cols", [1, 7, 33])
def test_ordering_fast_forms_equal_reference(mode, unknown, form, cols):
    keys, first = _order_keys(5, cols, seed=cols)
    specs = [tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None, None], tf.bool)]
    fast, ref = _both(chosen.stable_order, (keys, first), specs, form, mode, unknown, "ordering")
    np.testing.assert_array_equal(fast, ref)
    np.testing.assert_array_equal(ref, _lexsort(keys, first))


@pytest.mark.parametrize("form", sorting.FORMS)
def test_ordering_one_key_everywhere_keeps_index_order(form):
    keys = np.full((2, 6), -0.0, np.float32)
    keys[1, ::2] = 0.0
    first = np.array([[True, False] * 3, [False] * 6])
    for mode in ("graph", "xla"):
        fast, ref = _both(chosen.stable_order, (keys, first), None, form, mode, False, "ordering")
        np.testing.assert_array_equal(fast, ref)
        np.testing.assert_array_equal(fast, [[0, 2, 4, 1, 3, 5], [0, 1, 2, 3, 4, 5]])


# --- semi-hard ----------------------------------------------------------------------

B = 12  # one batch size for every semi-hard / top-k / distance weighted case: one compile per form
EXTRA = 7  # candidates after the batch in the non-square [B, M] cases (as a cross-batch memory adds)
M = B + EXTRA


def _semi_hard_case(name):
    """(D, labels, pos, neg, candidates) of B anchors; "memory": [B, M], the batch followed by
    EXTRA candidates (labels of all M, some of the anchors' classes, one class only there;
    some extra candidates are no anchor's candidate, as a memory's copy of an anchor)."""
    rng = np.random.default_rng(len(name))
    y = {
        "m_per_class": np.repeat(np.arange(3), 4),
        "uneven": np.repeat(np.arange(4), [6, 3, 2, 1]),  # P = 5: the compare loop
        "one_class": np.zeros(B, int),
        "all_distinct": np.arange(B),
        "pairs": np.repeat(np.arange(6), 2),
        "memory": np.repeat(np.arange(4), 3),
    }[name]
    y = rng.permutation(y).astype(np.int32)
    columns = B
    if name == "memory":
        y = np.concatenate([y, rng.choice(np.array([0, 1, 1, 2, 9], np.int32), size=EXTRA)])
        columns = M
    d = np.round(rng.uniform(0.0, 2.0, size=(B, columns)), 1).astype(np.float32)  # ties
    special = rng.random((B, columns)) < 0.25
    d[special] = rng.choice(np.array([-0.0, 0.0, HUGE, TINY, 2 * TINY], np.float32), size=int(special.sum()))
    pair_id = np.arange(B) % 3 if name == "uneven" else None
    cand = masks.candidate_mask(y, pair_id).numpy()[:B]
    if name == "memory":
        cand[np.arange(B), B + np.arange(B) % EXTRA] &= np.arange(B) % 2 == 0  # a memory's copy of an anchor
    pos, neg = (m.numpy() for m in masks.split_by_label(y, cand))
    return d, y, pos, neg, cand


SEMI_HARD_CASES = ["m_per_class", "uneven", "one_class", "all_distinct", "pairs", "memory"]
#: the table's parameters, and a sort threshold below every class: the sort branch
SEMI_HARD_PARAMS = {"table": None, "always_sort": -1}


def _with_semi_hard_params(monkeypatch, which):
    if SEMI_HARD_PARAMS[which] is not None:
        widths = kernels.CHOICES["CPU"]["semi_hard"]["graph"].params["widths"]
        choice = kernels.Choice("compare_or_sort", {"widths": widths, "sort_above": SEMI_HARD_PARAMS[which]})
        monkeypatch.setitem(kernels.CHOICES["CPU"], "semi_hard", {mode: choice for mode in kernels.MODES})


def _semi_hard_both(d, labels, pos, neg, mode, unknown, key):
    specs = [tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], labels.dtype),
             tf.TensorSpec([None, None], tf.bool), tf.TensorSpec([None, None], tf.bool)]
    return _both(semi_hard_sampler.semi_hard_negatives, (d, labels, pos, neg), specs, "compare_or_sort",
                 mode, unknown, key)


def _assert_same_negatives(fast, ref):
    (nearest, found), (ref_nearest, ref_found) = fast, ref
    np.testing.assert_array_equal(found, ref_found)
    np.testing.assert_array_equal(nearest[found], ref_nearest[found])


@pytest.mark.parametrize("mode,unknown", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("params", sorted(SEMI_HARD_PARAMS))
def test_semi_hard_compare_or_sort_equals_reference(mode, unknown, params, monkeypatch):
    _with_semi_hard_params(monkeypatch, params)
    for name in SEMI_HARD_CASES:
        d, y, pos, neg, _ = _semi_hard_case(name)
        fast, ref = _semi_hard_both(d, y, pos, neg, mode, unknown, ("semi_hard", params))
        _assert_same_negatives(fast, ref)
        if name in ("one_class", "all_distinct"):
            assert not ref[1].any()  # no positive with a negative: nothing found
        else:
            assert ref[1].any()


@pytest.mark.parametrize("mode", ["graph", "xla"])
def test_semi_hard_labels_that_are_not_integers(mode):
    """Float labels take the sort branch of the fast form."""
    d, y, pos, neg, _ = _semi_hard_case("uneven")
    fast, ref = _semi_hard_both(d, y.astype(np.float32), pos, neg, mode, False, "semi_hard_float")
    _assert_same_negatives(fast, ref)


@pytest.mark.parametrize("mode", ["graph", "xla"])
def test_semi_hard_sampler_same_selection_every_slot(mode):
    """The whole sampler, both fallbacks: every slot equal, invalid ones included."""

    def select(d, y, c):
        return [tuple(samplers.SemiHardSampler(f)(d, y, c)) for f in ("hardest_inside", "drop")]

    for name in ("m_per_class", "uneven", "memory"):
        d, y, _, _, cand = _semi_hard_case(name)
        fast, ref = _both(select, (d, y, cand), None, "compare_or_sort", mode, False, "semi_hard_sampler")
        _assert_equal(fast, ref)
        assert fast[0][0].shape == (B * d.shape[1],)


# --- top-k misplaced sets -----------------------------------------------------------


def _scores(seed, columns=B):
    rng = np.random.default_rng(seed)
    s = np.round(rng.uniform(-1.0, 1.0, size=(B, columns)), 1).astype(np.float32)  # ties
    special = rng.random((B, columns)) < 0.2
    s[special] = rng.choice(np.array([-0.0, 0.0, HUGE, -HUGE, TINY, -TINY], np.float32), size=int(special.sum()))
    return s


@pytest.mark.parametrize("mode,unknown", MODES, ids=MODE_IDS)
def test_top_k_prefix_equals_reference(mode, unknown):
    specs = [tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.int32),
             tf.TensorSpec([None, None], tf.bool)]
    for k in (1, 3, 16):  # 16 > B − 1: every candidate is in the top k
        assert k <= kernels.CHOICES["CPU"]["top_k"]["graph"].params["up_to"]

        def sets(s, y, c, k=k):
            return tuple(samplers.TopKMisplacedSampler(k)(s, y, c))

        # the last: [B, M], B anchors against the batch and EXTRA more candidates
        for seed, y in enumerate([np.repeat(np.arange(3), 4), np.zeros(B), np.arange(B), np.arange(M) % 4]):
            y = y.astype(np.int32)
            cand = masks.candidate_mask(y, np.arange(len(y)) % 2 if seed == 0 else None).numpy()[:B]
            scores = _scores(seed, len(y))
            fast, ref = _both(sets, (scores, y, cand), specs, "prefix", mode, unknown, ("top_k", k))
            _assert_equal(fast, ref)
            assert fast[0].shape == scores.shape


# --- distance weighted draws --------------------------------------------------------


def _draw_inputs(per_anchor, columns=B):
    """cdf, last, uniform, valid of a [B, columns] grid; at most ``per_anchor`` valid slots a row."""
    rng = np.random.default_rng(per_anchor + columns)
    probs = rng.random((B, columns)).astype(np.float32) * (rng.random((B, columns)) < 0.6)
    probs[0] = 0.0  # a row without mass
    probs[1] = np.where(np.arange(columns) == 3, 1.0, 0.0)  # one column holds it all
    cdf = np.cumsum(probs, axis=1).astype(np.float32)
    last = (columns - 1 - np.argmax((probs > 0)[:, ::-1], axis=1)).astype(np.int32)
    uniform = rng.random((B, columns)).astype(np.float32)
    uniform[2, :3] = [0.0, np.float32(1 - 2**-24), 0.5]
    valid = np.zeros((B, columns), bool)
    for a in range(B):
        valid[a, rng.permutation(columns)[: rng.integers(0, per_anchor + 1)]] = True
    return cdf, last, uniform, valid


@pytest.mark.parametrize("mode,unknown", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("form", distance_weighted.FORMS)
def test_distance_weighted_draws_equal_reference(mode, unknown, form, monkeypatch):
    """Both fast forms (valid_slots is a graph-mode form: under XLA the reference runs);
    listed_slots with few valid slots per anchor and, past its width, the whole grid."""
    monkeypatch.setitem(kernels.CHOICES["CPU"], "distance_weighted",
                        {"graph": kernels.Choice("valid_slots"), "xla": kernels.Choice("listed_slots", {"width": 4})})
    specs = [tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.int32),
             tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None, None], tf.bool)]
    # within the width, past it; [B, B] and [B, M] (EXTRA candidates after the batch)
    for per_anchor, columns in ((3, B), (B, B), (3, M), (M, M)):
        args = _draw_inputs(per_anchor, columns)
        fast, ref = _both(dw_sampler.draw_negatives, args, specs, form, mode, unknown, "draw")
        np.testing.assert_array_equal(fast, ref)
        assert not ref[~args[3]].any() and ref[args[3]].max() > 0


@pytest.mark.parametrize("mode", ["graph", "xla"])
@pytest.mark.parametrize("columns", [B, M], ids=["square", "anchors_x_candidates"])
def test_distance_weighted_sampler_same_selection(mode, columns):
    y = (np.arange(columns) % 3).astype(np.int32)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(columns, 8))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    d = np.linalg.norm(x[:B, None] - x[None], axis=-1).astype(np.float32)  # [B, columns]
    seed = np.array([3, 4], np.int32)

    def select(d, y, seed):
        return tuple(samplers.DistanceWeightedSampler()(d, y, seed=seed, embedding_dim=8))

    form = "valid_slots" if mode == "graph" else "listed_slots"
    fast, ref = _both(select, (d, y, seed), None, form, mode, False, "dw_sampler")
    _assert_equal(fast, ref)
    assert fast[0].shape == (B * columns,) and fast[3].any()


# --- the slots a triplet loss computes on -------------------------------------------


def _grid(name):
    """A semi-hard grid selection of a B = 12 batch (3 or 5 valid slots per anchor; "memory":
    B anchors against M candidates)."""
    d, y, _, _, cand = _semi_hard_case(name)
    return d, y, tuple(t.numpy() for t in samplers.SemiHardSampler()(d, y, cand))


def _triplet_counts(anchor, positive, negative, mask, columns=B):
    """int32 [B, M, M]: how often each valid triplet (a, p, n) occurs (M = ``columns``)."""
    index = tf.clip_by_value(tf.stack([anchor, positive, negative], axis=1), 0, columns - 1)
    return tf.tensor_scatter_nd_add(tf.zeros([B, columns, columns], tf.int32), index, tf.cast(mask, tf.int32))


def _with_listed_width(monkeypatch, width):
    choice = kernels.Choice("listed_slots", {"width": width})
    monkeypatch.setitem(kernels.CHOICES["CPU"], "triplet_slots", {"graph": kernels.Choice("valid_slots"),
                                                                 "xla": choice})


GRID_SPECS = [tf.TensorSpec([None], tf.int32)] * 3 + [tf.TensorSpec([None], tf.bool)]


@pytest.mark.parametrize("mode,unknown", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("width", [16, 2])  # every anchor's valid slots listed / the whole grid
def test_listed_slots_equal_the_whole_grid(mode, unknown, width, monkeypatch):
    """MetricLoss.over_triplets and triplets_to_pairs on the listed slots: the same
    triplets and pair counts as on all B·M slots (M = B, and B anchors against M candidates)."""
    _with_listed_width(monkeypatch, width)
    loss = losses.TripletLoss()

    for name in ("m_per_class", "uneven", "memory"):
        d, _, grid = _grid(name)
        columns = d.shape[1]

        def both(anchor, positive, negative, mask, columns=columns):
            grid = samplers.GridTripletSelection(anchor, positive, negative, mask)
            on = loss.over_triplets(grid, lambda s: _triplet_counts(s.anchor, s.positive, s.negative, s.mask, columns))
            return on, tuple(losses_batch.triplets_to_pairs(grid, B, columns=columns))

        fast, ref = _both(both, grid, GRID_SPECS, "listed_slots", mode, unknown, ("listed", width, columns))
        _assert_equal(fast, ref)
        assert fast[0].sum() == grid[3].sum() > 0
        assert fast[1][0].shape == (B, columns)


@pytest.mark.parametrize("unknown", [False, True], ids=["graph", "graph-unknown"])
def test_valid_slots_keep_the_same_triplets(unknown):
    """MetricLoss.sample cut to the valid slots (graph mode only): the same triplets as
    the whole selection."""
    loss = losses.TripletLoss()
    specs = [tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.int32)]

    def triplets(d, y):
        s = loss.sample(d, targets_lib.unpack(y), tf.zeros([tf.shape(y)[0], 4]))
        return _triplet_counts(s.anchor, s.positive, s.negative, s.mask), tf.shape(s.mask)[0]

    for name in ("m_per_class", "uneven"):
        d, y, _, _, _ = _semi_hard_case(name)
        (fast, slots), (ref, all_slots) = _both(triplets, (d, y), specs, "valid_slots", "graph", unknown,
                                               "valid_slots")
        np.testing.assert_array_equal(fast, ref)
        assert 0 < slots == ref.sum() < all_slots == B * B


def test_forcing_named_kernels_leaves_the_others_to_the_table():
    """``kernels.forced(form, kernels=[...])`` answers ``form`` for the named kernels only (a
    benchmark or a test can put one kernel on its reference path and keep the others fast)."""
    table = {name: kernels.choose(name, mode="xla", device="CPU") for name in MODULES}
    with kernels.forced(kernels.REFERENCE, kernels=["semi_hard"]):
        assert kernels.choose("semi_hard", mode="xla", device="CPU").is_reference
        for name in set(MODULES) - {"semi_hard"}:
            assert kernels.choose(name, mode="xla", device="CPU") == table[name], name
        with kernels.forced():  # an inner scope forcing every kernel, then back
            assert all(kernels.choose(name, mode="xla", device="CPU").is_reference for name in MODULES)
        assert kernels.choose("ordering", mode="xla", device="CPU") == table["ordering"]
    assert {name: kernels.choose(name, mode="xla", device="CPU") for name in MODULES} == table
    with pytest.raises(ValueError, match="Unknown kernel 'semi_hardd'.*semi_hard"):
        with kernels.forced(kernels.REFERENCE, kernels=["semi_hardd"]):
            pass
