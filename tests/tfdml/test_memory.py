"""Cross-batch memory (Wang et al. 2020, XBM): FIFO order and wrap-around, candidates of
batch ∪ memory for every sampler against NumPy brute-force selections, no self-pairs,
warm-up, evaluation, refusals."""

import numpy as np
import pytest
import tensorflow as tf

import tfdml
from tfdml import kernels, losses, memory as memory_lib, samplers, targets as targets_lib

B, K, D = 6, 5, 4


def _batch(rng, labels, ids, dim=D):
    x = rng.normal(size=(len(labels), dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, {"label": np.asarray(labels, np.int64), "example_id": np.asarray(ids, np.int64)}


def _write(mem, x, y):
    mem.update(targets_lib.unpack(y), tf.constant(x))


# -- FIFO ------------------------------------------------------------------------------


def test_fifo_order_and_wrap_around(rng):
    mem = memory_lib.CrossBatchMemory(size=5, embedding_dim=D)
    x1, y1 = _batch(rng, [1, 2, 3], [10, 11, 12])
    _write(mem, x1, y1)
    assert (int(mem.filled.numpy()), int(mem.position.numpy())) == (3, 3)
    np.testing.assert_array_equal(mem.example_ids.numpy()[:3], [10, 11, 12])
    np.testing.assert_array_equal(mem.embeddings.numpy()[:3], x1)
    x2, y2 = _batch(rng, [4, 5, 6], [20, 21, 22])
    _write(mem, x2, y2)  # rows 3, 4, then wraps to row 0 (the oldest, id 10)
    assert (int(mem.filled.numpy()), int(mem.position.numpy())) == (5, 1)
    np.testing.assert_array_equal(mem.example_ids.numpy(), [22, 11, 12, 20, 21])
    np.testing.assert_array_equal(mem.labels.numpy(), [6, 2, 3, 4, 5])
    np.testing.assert_array_equal(mem.embeddings.numpy(), np.stack([x2[2], x1[1], x1[2], x2[0], x2[1]]))
    x3, y3 = _batch(rng, list(range(7)), list(range(30, 37)))  # B = 7 > K = 5: its last 5 rows
    _write(mem, x3, y3)
    assert (int(mem.filled.numpy()), int(mem.position.numpy())) == (5, 1)
    np.testing.assert_array_equal(mem.example_ids.numpy(), [36, 32, 33, 34, 35])
    np.testing.assert_array_equal(mem.embeddings.numpy(), x3[[6, 2, 3, 4, 5]])


def test_warmup_leaves_the_memory_empty_and_unused(rng):
    loss = losses.ContrastiveLoss(memory={"size": K, "warmup_steps": 2})
    plain = losses.ContrastiveLoss()
    x, y = _batch(rng, [0, 0, 1, 1, 2, 2], range(B))
    for _ in range(2):
        assert float(loss(y, x)) == float(plain(y, x))
        assert int(loss.memory.filled.numpy()) == 0
    loss(y, x)  # the first call after the warm-up writes
    assert int(loss.memory.filled.numpy()) == K and int(loss.memory.steps.numpy()) == 3


def test_paused_memory_neither_changes_the_loss_nor_is_written(rng):
    loss = losses.ContrastiveLoss(memory={"size": K})
    plain = losses.ContrastiveLoss()
    x, y = _batch(rng, [0, 0, 1, 1, 2, 2], range(B))
    loss(y, x)
    before = loss.memory.embeddings.numpy().copy()
    x2, y2 = _batch(rng, [0, 0, 1, 1, 2, 2], range(10, 16))
    with loss.memory.paused():
        assert float(loss(y2, x2)) == float(plain(y2, x2))
    np.testing.assert_array_equal(loss.memory.embeddings.numpy(), before)
    assert int(loss.memory.steps.numpy()) == 1


# -- candidates -----------------------------------------------------------------------------


def _filled_memory(rng, batch_ids):
    """A memory of K = 5 rows, 4 filled, one holding the batch's example 2 (its own example)."""
    mem = memory_lib.CrossBatchMemory(size=K, embedding_dim=D)
    xm, ym = _batch(rng, [0, 1, 2, 0], [batch_ids[2], 40, 41, 42])
    _write(mem, xm, ym)
    return mem, xm, ym


def _brute_force_mask(batch_ids, mem_ids, filled):
    b = len(batch_ids)
    mask = np.zeros((b, b + K), bool)
    for a in range(b):
        for j in range(b):
            mask[a, j] = a != j
        for k in range(K):
            mask[a, b + k] = k < filled and mem_ids[k] != batch_ids[a]
    return mask


def _inputs(rng):
    """D [B, B + K] (computed once, given to the sampler and the reference alike), the
    candidates' labels and the mask that the memory gives."""
    ids = np.arange(100, 100 + B)
    x, y = _batch(rng, [0, 0, 1, 1, 2, 3], ids)
    mem, xm, ym = _filled_memory(rng, ids)
    view = mem.candidates(targets_lib.unpack(y), tf.constant(x), np.logical_not(np.eye(B, dtype=bool)))
    mask = view.mask.numpy()
    mem_ids = mem.example_ids.numpy()
    np.testing.assert_array_equal(mask, _brute_force_mask(ids, mem_ids, 4))
    labels = view.labels.numpy()
    np.testing.assert_array_equal(labels[:B], y["label"])
    np.testing.assert_array_equal(labels[B:B + 4], ym["label"])
    cands = np.concatenate([x, mem.embeddings.numpy()])
    dist = np.linalg.norm(x[:, None, :] - cands[None, :, :], axis=-1).astype(np.float32)
    return dist, labels, mask


def _split(labels, mask):
    same = labels[:mask.shape[0], None] == labels[None, :]
    return mask & same, mask & ~same


def test_memory_mask_never_pairs_an_entry_with_its_own_example(rng):
    dist, labels, mask = _inputs(rng)
    assert not mask[2, B + 0]  # row 0 holds example 2 itself
    assert mask[3, B + 0] and not mask[:, B + 4].any()  # another anchor pairs with it; row 4 is empty


def test_hard_sampler_over_batch_and_memory_equals_brute_force(rng):
    dist, labels, mask = _inputs(rng)
    sel = samplers.HardSampler()(dist, labels, candidates=mask)
    pos, neg = _split(labels, mask)
    for a in range(B):
        valid = pos[a].any() and neg[a].any()
        assert bool(sel.mask.numpy()[a]) == valid
        if valid:
            assert sel.positive.numpy()[a] == np.flatnonzero(pos[a])[np.argmax(dist[a, pos[a]])]
            assert sel.negative.numpy()[a] == np.flatnonzero(neg[a])[np.argmin(dist[a, neg[a]])]


@pytest.mark.parametrize("fallback", ["hardest_inside", "drop"])
@pytest.mark.parametrize("path", ["compare", "sort", "reference"])
def test_semi_hard_sampler_over_batch_and_memory_equals_brute_force(rng, monkeypatch, fallback, path):
    """Both branches of the CPU fast form (tfdml.kernels.semi_hard) and the reference path."""
    if path == "sort":
        choice = kernels.Choice("compare_or_sort", {"widths": (1, 2, 3, 4), "sort_above": -1})
        monkeypatch.setitem(kernels.CHOICES["CPU"], "semi_hard", {mode: choice for mode in kernels.MODES})
    dist, labels, mask = _inputs(rng)
    m = dist.shape[1]
    with kernels.forced(kernels.REFERENCE if path == "reference" else "compare_or_sort"):
        sel = samplers.SemiHardSampler(fallback=fallback)(dist, labels, candidates=mask)
    got = {(a, p): n for a, p, n, v in zip(sel.anchor.numpy(), sel.positive.numpy(),
                                          sel.negative.numpy(), sel.mask.numpy()) if v}
    pos, neg = _split(labels, mask)
    want = {}
    for a in range(B):
        negatives = np.flatnonzero(neg[a])
        for p in np.flatnonzero(pos[a]):
            beyond = [n for n in negatives if dist[a, n] > dist[a, p]]
            if beyond:
                want[(a, p)] = min(beyond, key=lambda n: (dist[a, n], n))
            elif fallback == "hardest_inside" and len(negatives):
                want[(a, p)] = max(negatives, key=lambda n: (dist[a, n], -n))
    assert got == want
    assert len(sel.anchor.numpy()) == B * m
    assert any(p >= B for _, p in want)  # memory rows are positives of some anchor


def test_distance_weighted_sampler_over_batch_and_memory(rng):
    dist, labels, mask = _inputs(rng)
    sampler = samplers.DistanceWeightedSampler(nonzero_loss_cutoff=None)
    probs = sampler.probabilities(dist, labels, candidates=mask, embedding_dim=D).numpy()
    _, neg = _split(labels, mask)
    n = float(D)
    for a in range(B):  # Pr(n | a) ∝ q(d)^-1 over the candidate negatives (Wu et al. §4)
        d = np.clip(dist[a].astype(np.float64), 0.5, 2 - 1e-4)
        w = np.where(neg[a], d ** (2 - n) * (1 - d * d / 4) ** ((3 - n) / 2), 0.0)
        np.testing.assert_allclose(probs[a], w / w.sum(), rtol=1e-4, atol=1e-7)
    sel = sampler(dist, labels, candidates=mask, seed=tf.constant([1, 2]), embedding_dim=D)
    pos, neg = _split(labels, mask)
    valid = sel.mask.numpy().reshape(B, -1)
    np.testing.assert_array_equal(valid, pos & neg.any(axis=1, keepdims=True))
    for a, p, ng, v in zip(sel.anchor.numpy(), sel.positive.numpy(), sel.negative.numpy(), sel.mask.numpy()):
        if v:
            assert neg[a, ng] and probs[a, ng] > 0


def test_random_pair_sampler_over_batch_and_memory_equals_brute_force(rng):
    dist, labels, mask = _inputs(rng)
    seed = tf.constant([3, 4])
    sel = samplers.RandomPairSampler(num_pairs=20)(dist, labels, candidates=mask, seed=seed)
    cells = np.flatnonzero(mask.reshape(-1))  # candidates in row-major order
    draws = samplers.base.uniform_int([20], seed, len(cells)).numpy()
    counts = np.bincount(cells[draws], minlength=mask.size).reshape(mask.shape)
    pos, neg = _split(labels, mask)
    np.testing.assert_array_equal(sel.pos_weight.numpy(), np.where(pos, counts, 0))
    np.testing.assert_array_equal(sel.neg_weight.numpy(), np.where(neg, counts, 0))


@pytest.mark.parametrize("name", ["all", "multi_similarity"])
def test_other_pair_samplers_over_batch_and_memory_equal_brute_force(rng, name):
    dist, labels, mask = _inputs(rng)
    sel = samplers.get(name)(dist, labels, candidates=mask)
    pos, neg = _split(labels, mask)
    if name == "multi_similarity":
        inf = np.inf
        hardest_pos = np.where(pos, dist, -inf).max(axis=1, keepdims=True)
        hardest_neg = np.where(neg, dist, inf).min(axis=1, keepdims=True)
        pos, neg = pos & (dist > hardest_neg - 0.1), neg & (dist < hardest_pos + 0.1)
    np.testing.assert_array_equal(sel.pos_weight.numpy(), pos.astype(np.float32))
    np.testing.assert_array_equal(sel.neg_weight.numpy(), neg.astype(np.float32))


@pytest.mark.parametrize("form", ["prefix", kernels.REFERENCE])  # the CPU fast form and the reference path
def test_top_k_sampler_over_batch_and_memory_equals_brute_force(rng, form):
    dist, labels, mask = _inputs(rng)
    scores = -dist
    k = 3
    with kernels.forced(form):
        sel = samplers.TopKMisplacedSampler(k=k)(scores, labels, candidates=mask)
    pos, neg = _split(labels, mask)
    for a in range(B):
        ranked = sorted(np.flatnonzero(mask[a]), key=lambda j: (-scores[a, j], j))  # Lu et al. §3.3
        top = set(ranked[:k])
        n_plus = int(pos[a].sum())
        p_set, n_set = set(), set()
        if n_plus < k:  # Eq. 6, 7
            p_set = {j for j in ranked if pos[a, j] and j not in top}
            negs = [j for j in ranked if neg[a, j]]
            n_set = {j for j in negs[k - n_plus:] if j in top}
        else:  # Eq. 9, 10
            n_set = {j for j in top if neg[a, j]}
            best = [j for j in ranked if pos[a, j]][:k]
            p_set = {j for j in best if j not in top}
        assert set(np.flatnonzero(sel.positive.numpy()[a])) == p_set
        assert set(np.flatnonzero(sel.negative.numpy()[a])) == n_set


# -- losses with a memory --------------------------------------------------------------------


def _loss_with_memory(rng, loss):
    """``loss`` after one call on a first batch (the memory then holds it), and the second batch."""
    x1, y1 = _batch(rng, [0, 0, 1, 1, 2, 2], range(B))
    loss(y1, x1)
    x2, y2 = _batch(rng, [0, 0, 1, 1, 3, 3], [0, 11, 12, 13, 14, 15])  # example 0 again
    return x1, y1, x2, y2


def test_contrastive_over_batch_and_memory_equals_brute_force(rng):
    loss = losses.ContrastiveLoss(margin=1.0, memory={"size": 8})
    x1, y1, x2, y2 = _loss_with_memory(rng, loss)
    got = float(loss(y2, x2))
    cands = np.concatenate([x2, x1]).astype(np.float64)  # the memory: the first batch (6 of 8 rows)
    labels = np.concatenate([y2["label"], y1["label"]])
    ids = np.concatenate([y2["example_id"], y1["example_id"]])
    total, count = 0.0, 0
    for a in range(B):  # Wu et al. §3: y D² + (1 − y)[α − D]_+², every candidate pair
        for j in range(len(cands)):
            if j == a or (j >= B and ids[j] == ids[a]):
                continue
            d = np.linalg.norm(x2[a] - cands[j])
            total += d * d if labels[j] == labels[a] else max(1.0 - d, 0.0) ** 2
            count += 1
    assert count == B * (B - 1) + B * B - 1  # example 0 never meets its own memory entry
    assert got == pytest.approx(total / count, rel=1e-5)
    np.testing.assert_array_equal(loss.memory.example_ids.numpy(), [12, 13, 14, 15, 4, 5, 0, 11])  # wrapped


def test_triplet_hard_over_batch_and_memory_equals_brute_force(rng):
    loss = losses.TripletLoss(margin=0.2, sampler="hard", memory={"size": 8})
    x1, y1, x2, y2 = _loss_with_memory(rng, loss)
    got = float(loss(y2, x2))
    cands = np.concatenate([x2, x1]).astype(np.float64)
    labels = np.concatenate([y2["label"], y1["label"]])
    ids = np.concatenate([y2["example_id"], y1["example_id"]])
    terms = []
    for a in range(B):
        d = np.linalg.norm(x2[a] - cands, axis=1)
        ok = np.array([j != a and not (j >= B and ids[j] == ids[a]) for j in range(len(cands))])
        pos, neg = ok & (labels == labels[a]), ok & (labels != labels[a])
        if pos.any() and neg.any():
            terms.append(max(d[pos].max() ** 2 - d[neg].min() ** 2 + 0.2, 0.0))
    assert got == pytest.approx(np.mean(terms), rel=1e-5)


def test_empty_memory_gives_the_loss_of_the_batch(rng):
    x, y = _batch(rng, [0, 0, 1, 1, 2, 2], range(B))
    for name, kwargs in [("contrastive", {}), ("triplet", {}), ("margin", {"sampler": None}),
                         ("multi_similarity", {})]:
        with_memory = float(losses.get(name, memory={"size": K}, **kwargs)(y, x))
        assert with_memory == pytest.approx(float(losses.get(name, **kwargs)(y, x)), rel=1e-6)


@pytest.mark.parametrize("name", sorted(losses.LOSSES))
def test_every_loss_takes_or_refuses_a_memory_with_the_reason(name):
    cls = losses.LOSSES[name]
    kwargs = {"num_classes": 3} if name in ("balanced_contrastive", "proxy_nca", "proxy_anchor") else {}
    if name == "weighted_contrastive":
        kwargs["importance"] = False  # its default; with a memory refused (next test)
    if cls.memory_refusal is None:
        loss = losses.get(name, memory={"size": K}, **kwargs)
        assert loss.memory.size == K and loss.memory in loss.parameter_layers
        assert loss.get_config()["memory"]["size"] == K
    else:  # refused with the reason, or (a signature without the base arguments) no such argument
        with pytest.raises((ValueError, TypeError)) as err:
            losses.get(name, memory={"size": K}, **kwargs)
        assert ("cannot use a cross-batch memory: " + cls.memory_refusal in str(err.value)
                or "unexpected keyword argument 'memory'" in str(err.value))


# -- importance weights of memory pairs (tfdml.importance.memory_pair_weights) ------------

# A split small enough to enumerate every (m, n)-group batch: classes of 2, 3 and 3 examples,
# m = n = 2 (B = 4), and a memory of K = B rows holding the previous batch.
SPLIT = np.array([0, 0, 1, 1, 1, 2, 2, 2])
GROUP_M = GROUP_N = 2


def _group_batches():
    """Every (m, n)-group batch of SPLIT (example ids) with its probability (Hong §4.2)."""
    import itertools
    from math import comb

    classes = np.unique(SPLIT)
    members = {c: np.flatnonzero(SPLIT == c) for c in classes}
    out = []
    for chosen in itertools.combinations(classes, GROUP_N):
        subsets = [list(itertools.combinations(members[c], GROUP_M)) for c in chosen]
        p = 1.0 / comb(len(classes), GROUP_N) / np.prod([len(s) for s in subsets])
        for parts in itertools.product(*subsets):
            out.append((np.concatenate(parts), p))
    return out


def _group_columns(ids, w_memory_scale=1.0):
    from pipelines import designs

    plan = designs.GroupDesign(GROUP_M, GROUP_N).validate(SPLIT)
    b = len(ids)
    return {"label": SPLIT[ids].astype(np.int64), "example_id": ids.astype(np.int64),
            "class_size": plan.class_size[ids], "w_pos": np.full(b, plan.w_pos, np.float32),
            "w_neg": np.full(b, plan.w_neg, np.float32),
            "w_memory": np.full(b, plan.w_memory * w_memory_scale, np.float32)}


def _expected_loss_with_a_full_memory(x, margin, w_memory_scale=1.0):
    """E over (previous batch, current batch) of the importance-weighted contrastive loss of
    the current batch against a memory holding the previous one (batches independent)."""
    loss = losses.ContrastiveLoss(margin=margin, importance=True,
                                  memory={"size": GROUP_M * GROUP_N, "embedding_dim": x.shape[1]})
    step = tf.function(lambda y, e: loss(y, e))
    batches = _group_batches()
    total = 0.0
    for past, p in batches:
        for now, q in batches:
            loss.memory.reset()
            _write(loss.memory, x[past], _group_columns(past, w_memory_scale))
            y = {k: tf.constant(v) for k, v in _group_columns(now, w_memory_scale).items()}
            total += p * q * float(step(y, tf.constant(x[now])))
    return total


def _uniform_pairs_loss(x, margin):
    d = np.linalg.norm(x[:, None] - x[None, :], axis=-1)
    same = SPLIT[:, None] == SPLIT[None, :]
    terms = np.where(same, d ** 2, np.maximum(margin - d, 0.0) ** 2)
    off = ~np.eye(len(SPLIT), dtype=bool)
    return terms[off].mean()


def test_importance_weighted_loss_with_a_memory_is_unbiased_for_the_uniform_pairs_loss():
    # Exact expectation (every pair of independent group batches, with its probability):
    # no sampling error, so the tolerance is float32 rounding only.
    x = np.random.default_rng(7).normal(size=(len(SPLIT), 3)).astype(np.float32)
    margin = 2.5
    expected = _expected_loss_with_a_full_memory(x, margin)
    assert expected == pytest.approx(_uniform_pairs_loss(x, margin), rel=1e-4)


def test_importance_weighted_loss_with_a_memory_over_the_group_design_s_stream_is_unbiased():
    # The design's own (seeded, stateless) stream through a loss whose memory fills itself: the
    # values of every third step share no batch (K = 2B), so they are independent draws.
    from pipelines import designs

    x = np.random.default_rng(7).normal(size=(len(SPLIT), 3)).astype(np.float32)
    margin, steps = 2.5, 600
    loss = losses.ContrastiveLoss(margin=margin, importance=True, memory={"size": 2 * GROUP_M * GROUP_N})
    step = tf.function(lambda y, e: loss(y, e))
    stream = designs.GroupDesign(GROUP_M, GROUP_N).index_batches(SPLIT, seed=3).take(steps)
    values = [float(step(cols, tf.gather(x, cols["example_id"]))) for cols in stream]
    assert int(loss.memory.filled.numpy()) == 2 * GROUP_M * GROUP_N
    draws = np.array(values[2::3])  # from step 2 on the memory holds two whole batches
    error = draws.std(ddof=1) / np.sqrt(len(draws))
    assert abs(draws.mean() - _uniform_pairs_loss(x, margin)) < 3 * error


def test_memory_pair_weights_under_xla_equal_graph(rng):
    x = rng.normal(size=(len(SPLIT), 3)).astype(np.float32)
    past, now = np.array([0, 1, 2, 3]), np.array([2, 4, 5, 6])
    values = []
    for jit in (False, True):
        loss = losses.ContrastiveLoss(margin=2.5, importance=True, memory={"size": 4})
        step = tf.function(lambda y, e: loss(y, e), jit_compile=jit)
        for ids in (past, now):
            value = float(step({k: tf.constant(v) for k, v in _group_columns(ids).items()},
                               tf.constant(x[ids])))
        values.append(value)
    assert int(loss.memory.filled.numpy()) == 4
    assert values[1] == pytest.approx(values[0], rel=1e-5)


def test_group_design_batches_train_with_importance_weights_and_a_memory():
    import keras

    from pipelines import designs
    from tfdml import models

    labels = np.repeat(np.arange(8), 4)
    features = np.random.default_rng(0).normal(size=(32, 16)).astype(np.float32)
    data = designs.GroupDesign(2, 4).index_batches(labels, seed=0).take(4).map(
        lambda cols: (tf.gather(features, cols["example_id"]), cols))
    encoder = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.UnitNormalization()])
    model = models.EmbeddingModel(encoder)
    loss = losses.ContrastiveLoss(importance=True, memory={"size": 16})
    model.compile(optimizer="adam", loss=loss, jit_compile=True)
    history = model.fit(data, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0]) and int(loss.memory.filled.numpy()) == 16


def test_memory_pair_weights_without_the_memory_term_are_biased():
    # w_memory = 0 drops phi*pi_i*pi_j from E_ij: memory pairs are then weighted as if only
    # the batch design put them there, and the expectation misses the uniform-pairs loss.
    x = np.random.default_rng(7).normal(size=(len(SPLIT), 3)).astype(np.float32)
    margin = 2.5
    dropped = _expected_loss_with_a_full_memory(x, margin, w_memory_scale=0.0)
    target = _uniform_pairs_loss(x, margin)
    assert abs(dropped - target) > 0.05 * target


def test_memory_pair_weights_with_an_empty_memory_are_the_batch_weights(rng):
    ids = np.array([0, 1, 2, 3])
    y, x = _group_columns(ids), rng.normal(size=(4, D)).astype(np.float32)
    with_memory = losses.ContrastiveLoss(importance=True, memory={"size": 4})
    assert float(with_memory(y, x)) == pytest.approx(float(losses.ContrastiveLoss(importance=True)(y, x)),
                                                     rel=1e-6)


def test_memory_pair_weights_need_the_group_design_s_column(rng):
    ids = np.array([0, 1, 2, 3])
    y, x = _group_columns(ids), rng.normal(size=(4, D)).astype(np.float32)
    del y["w_memory"]  # what an m-per-class batch carries
    loss = losses.ContrastiveLoss(importance=True, memory={"size": 4})
    with pytest.raises(ValueError, match=r"no 'w_memory' column.*\(m, n\)-group design"):
        loss(y, x)


def test_memory_pair_weights_need_a_memory_of_whole_batches(rng):
    ids = np.array([0, 1, 2, 3])
    y, x = _group_columns(ids), rng.normal(size=(4, D)).astype(np.float32)
    loss = losses.ContrastiveLoss(importance=True, memory={"size": 6})
    with pytest.raises(ValueError, match="multiple of the batch size"):
        loss(y, x)


@pytest.mark.parametrize("name, kwargs, match", [
    ("triplet", {}, "triplet weights .* not derived"),
    ("contrastive", {"sampler": "random"}, "all pairs"),
    ("contrastive", {"tuple_reduction": "mean_active"}, 'tuple_reduction="mean"'),
    ("margin", {}, "derived for the contrastive losses"),
])
def test_importance_weights_with_a_memory_are_refused_where_not_derived(name, kwargs, match):
    with pytest.raises(ValueError, match=r"importance=True\) with a cross-batch memory: .*" + match):
        losses.get(name, memory={"size": K}, importance=True, **kwargs)


def test_memory_needs_example_ids_and_no_pair_ids(rng):
    loss = losses.ContrastiveLoss(memory={"size": K})
    x, y = _batch(rng, [0, 0, 1, 1, 2, 2], range(B))
    with pytest.raises(ValueError, match="needs the 'example_id' column"):
        loss({"label": y["label"]}, x)
    with pytest.raises(ValueError, match="cannot serve a batch of isolated pairs"):
        loss({**y, "pair_id": np.array([0, 0, 1, 1, 2, 2])}, x)


@pytest.mark.parametrize("bad, match", [
    ({"size": 0}, "size must be an integer >= 1"),
    ({"size": 4, "warmup_steps": -1}, "warmup_steps must be an integer >= 0"),
    ({"warmup_steps": 3}, "give its size"),
    ({"size": 4, "length": 3}, r"unknown option\(s\) \['length'\]"),
])
def test_bad_memory_options_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        losses.ContrastiveLoss(memory=bad)


# -- static shapes, XLA -----------------------------------------------------------------------

SELECTING = {
    "hard": lambda: samplers.HardSampler(),
    "semi_hard": lambda: samplers.SemiHardSampler(),
    "random": lambda: samplers.RandomPairSampler(num_pairs=12),
    "multi_similarity": lambda: samplers.MultiSimilaritySampler(),
    "top_k": lambda: samplers.TopKMisplacedSampler(k=3),
}


@pytest.mark.parametrize("name", sorted(SELECTING))
def test_xla_selection_over_batch_and_memory_equals_graph(rng, name):
    dist, labels, mask = _inputs(rng)
    sampler = SELECTING[name]()
    spec = (tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None, None], tf.bool))

    def run(d, y, c):
        return tuple(sampler(d, y, candidates=c, seed=tf.constant([5, 6]), embedding_dim=D))

    graph = tf.function(run, input_signature=spec)(dist, labels, mask)
    xla = tf.function(run, input_signature=spec, jit_compile=True)(dist, labels, mask)
    for g, x in zip(graph, xla):
        np.testing.assert_array_equal(x.numpy(), g.numpy())


def test_xla_distance_weighted_draws_over_batch_and_memory_follow_the_cdf(rng):
    dist, labels, mask = _inputs(rng)
    sampler = samplers.DistanceWeightedSampler(nonzero_loss_cutoff=None)
    seed = tf.constant([7, 8])
    spec = (tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None, None], tf.bool))
    sel = tf.function(lambda d, y, c: tuple(sampler(d, y, candidates=c, seed=seed, embedding_dim=D)),
                      input_signature=spec, jit_compile=True)(dist, labels, mask)
    cdf = np.cumsum(sampler.probabilities(dist, labels, mask, embedding_dim=D).numpy(), axis=1)
    u = samplers.base.uniform01(list(mask.shape), seed).numpy() * cdf[:, -1:]
    pos, neg = _split(labels, mask)
    valid = sel[3].numpy().reshape(mask.shape)
    np.testing.assert_array_equal(valid, pos & neg.any(axis=1, keepdims=True))
    a, p = np.nonzero(valid)
    got = sel[2].numpy().reshape(mask.shape)[a, p]
    below = np.where(got > 0, cdf[a, np.maximum(got - 1, 0)], 0.0)
    assert np.all(below <= u[a, p] + 1e-5) and np.all(u[a, p] < cdf[a, got] + 1e-5)
    assert np.all(neg[a, got])


def _tiny_data(n=22):
    """22 examples (batches of 8: a partial last batch of 6), 4 dimensions, 5 classes."""
    r = np.random.default_rng(3)
    x = r.normal(size=(n, 6)).astype(np.float32)
    y = {"label": (np.arange(n) // 2 % 5).astype(np.int64), "example_id": np.arange(n, dtype=np.int64)}
    return x, y


def _tiny_model(loss, jit_compile, strategy=None):
    import keras

    from tfdml import models

    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        keras.utils.set_random_seed(1)
        encoder = keras.Sequential([keras.Input((6,)), keras.layers.Dense(D, name="embedding"),
                                    keras.layers.UnitNormalization()])
        model = models.EmbeddingModel(encoder)
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss(), jit_compile=jit_compile)
        model.build((None, 6))
    return model


def _semi_hard_with_memory():
    return losses.TripletLoss(sampler="semi_hard", memory={"size": 12, "warmup_steps": 1, "embedding_dim": D})


def _fit(model, epochs=2, batch=8):
    x, y = _tiny_data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)  # unknown batch size, partial last batch
    return model.fit(ds, epochs=epochs, verbose=0).history["loss"]


def test_step_with_a_memory_compiles_once_and_xla_loss_and_graph_agree():
    runs = {}
    for mode in (False, True, "loss"):
        model = _tiny_model(_semi_hard_with_memory, mode)
        runs[mode] = (_fit(model), model)
        memory = model._metric_loss.memory
        assert int(memory.steps.numpy()) == 6 and int(memory.filled.numpy()) == 12
    graph_loss, graph = runs[False]
    for mode in (True, "loss"):
        loss, model = runs[mode]
        np.testing.assert_allclose(loss, graph_loss, rtol=1e-4)
        for a, b in zip(model.weights, graph.weights):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-5)
    # One trace for batches of 8 and the partial batch of 6.
    assert runs["loss"][1]._loss_call._value_and_gradients.experimental_get_tracing_count() == 1


def test_evaluation_neither_uses_nor_writes_the_memory():
    model = _tiny_model(_semi_hard_with_memory, False)
    _fit(model, epochs=1)
    memory = model._metric_loss.memory
    before = [v.numpy().copy() for v in memory.weights]
    x, y = _tiny_data()
    with_memory = model.evaluate(x[:8], {k: v[:8] for k, v in y.items()}, batch_size=8, verbose=0)[0]
    for a, v in zip(before, memory.weights):
        np.testing.assert_array_equal(v.numpy(), a)
    plain = losses.TripletLoss(sampler="semi_hard")
    expected = float(plain({k: v[:8] for k, v in y.items()}, model(x[:8])))
    assert with_memory == pytest.approx(expected, rel=1e-5)


# -- runs: backups, resume, export --------------------------------------------------------------


def test_kill_and_resume_equals_uninterrupted(tmp_path):
    from tfdml import runs

    uninterrupted = _tiny_model(_semi_hard_with_memory, False)
    _fit(uninterrupted, epochs=2)
    first = _tiny_model(_semi_hard_with_memory, False)
    _fit(first, epochs=1)  # then the process is killed: only the backup of epoch 1 survives
    memory = first._metric_loss.memory
    assert int(memory.filled.numpy()) == 12 and {id(v) for v in memory.weights} <= {id(v) for v in first.weights}
    backup = runs.Backup(str(tmp_path / "backup"))
    backup.save(first, 1)
    resumed = _tiny_model(_semi_hard_with_memory, False)
    backup.restore(resumed)
    restored = resumed._metric_loss.memory
    for a, b in zip(restored.weights, memory.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    x, y = _tiny_data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    resumed.fit(ds, epochs=2, initial_epoch=1, verbose=0)
    assert len(resumed.weights) == len(uninterrupted.weights)
    for a, b in zip(resumed.weights, uninterrupted.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(resumed._metric_loss.memory.example_ids.numpy(),
                                  uninterrupted._metric_loss.memory.example_ids.numpy())


def test_memory_is_not_part_of_the_exported_encoder(tmp_path):
    model = _tiny_model(_semi_hard_with_memory, False)
    _fit(model, epochs=1)
    path = str(tmp_path / "exported")
    model.export(path)
    loaded = tf.saved_model.load(path)
    names = [v.name for v in loaded.variables]
    assert len(names) == len(model.encoder.weights) and not any("memory" in n for n in names)
    x, _ = _tiny_data()
    np.testing.assert_allclose(loaded.serve(x[:4]).numpy(), model(x[:4]).numpy(), rtol=1e-5, atol=1e-6)


# -- distribution --------------------------------------------------------------------------------


def test_mirrored_strategy_memory_holds_the_global_batch_and_equals_one_device(mirrored_strategy):
    one = _tiny_model(_semi_hard_with_memory, False)
    one_loss = _fit(one)
    two = _tiny_model(_semi_hard_with_memory, False, strategy=mirrored_strategy)
    two_loss = _fit(two)
    np.testing.assert_allclose(two_loss, one_loss, rtol=1e-5)
    single = one._metric_loss.memory
    mirrored = two._metric_loss.memory
    for a, b in zip(mirrored.weights, single.weights):
        local = mirrored_strategy.experimental_local_results(a.value)
        assert len(local) == 2
        for replica in local:  # identical on every replica, and the one-device memory
            np.testing.assert_allclose(replica.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(mirrored.example_ids.numpy(), single.example_ids.numpy())


def test_the_guide_s_memory_example_runs(capsys):
    import os
    import re

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    guide = open(os.path.join(root, "docs", "guide.md"), encoding="utf-8").read()
    example = next(b for b in re.findall(r"```python\n(.*?)```", guide, flags=re.S) if "memory=" in b)
    exec(compile(example, "docs/guide.md", "exec"), {"__name__": "guide_memory_example"})
    assert "32 embeddings in the memory" in capsys.readouterr().out


def test_keras_round_trip_keeps_the_loss_s_memory(tmp_path):
    import keras

    loss = _semi_hard_with_memory()
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert (again.memory.size, again.memory.warmup_steps, again.memory.embedding_dim) == (12, 1, D)
    model = _tiny_model(_semi_hard_with_memory, False)
    _fit(model, epochs=1)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = tfdml.load_model(path)
    for a, b in zip(loaded._metric_loss.memory.weights, model._metric_loss.memory.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# -- the loss object does not change during a call -----------------------------------------


def _recording(cls):
    """``cls`` whose compute records the loss's attributes as they are at its end."""

    class Recording(cls):
        def compute(self, targets, embeddings, candidates=None):
            value = super().compute(targets, embeddings, candidates)
            self.__class__.seen.append(dict(vars(self)))
            return value

    Recording.seen = []
    return Recording


@pytest.mark.parametrize("cls, kwargs, columns", [
    (losses.ContrastiveLoss, {"importance": True, "memory": {"size": 4}}, "group"),
    (losses.ContrastiveLoss, {"importance": True}, "group"),
    (losses.TripletLoss, {"sampler": "random_triplets", "seed": 3, "importance": True, "memory": None}, "group"),
    (losses.MarginLoss, {"sampler": "distance_weighted", "seed": 1, "memory": {"size": 4}}, "labels"),
], ids=["contrastive-importance-memory", "contrastive-importance", "triplet-importance",
        "margin-memory"])
def test_a_call_changes_no_attribute_of_the_loss(cls, kwargs, columns):
    """What compute mines against is a value it receives (tfdml.candidates.Candidates):
    no attribute of the loss object is set during a call (its state lives in variables)."""
    x = np.random.default_rng(0).normal(size=(len(SPLIT), 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    loss = _recording(cls)(**kwargs)
    before = dict(vars(loss))
    for ids in (np.array([0, 1, 2, 3]), np.array([2, 3, 5, 6])):
        y = _group_columns(ids)
        if columns == "labels":
            y = {"label": y["label"], "example_id": y["example_id"]}
        if cls is losses.TripletLoss:
            y["w_triplet"] = np.full(len(ids), 0.5, np.float32)
        assert np.isfinite(float(loss(y, tf.constant(x[ids]))))
    if loss.memory is not None:
        assert int(loss.memory.filled.numpy()) == 4  # the memory was written (and used)
    assert len(type(loss).seen) == 2
    for seen in type(loss).seen + [dict(vars(loss))]:
        assert seen.keys() == before.keys()
        changed = [name for name in before if seen[name] is not before[name]]
        assert not changed, f"attributes set during the call: {changed}"
