"""Importance-weighted mini-batch loss (Hong Eq. 23) is unbiased for the full loss (Eq. 10).

For a fixed embedding, the mini-batch loss of each design — the mean over the
batch's scored ordered pairs of W_ij·ℓ_ij, with W_ij from the batch columns
via ``tfdml.importance.pair_weights`` — averaged over many batches must equal
the weighted contrastive loss Eq. 10 over all ordered pairs of the training
split divided by N(N−1) (the designs keep P_U's 1/(N(N−1)), so W is Eq. 24 /
25 exactly). Tolerance: 4 standard errors of the batch average. Without the
weights the same average misses the full loss by many standard errors.
"""

import numpy as np
import pytest
import tensorflow as tf

from pipelines import designs
from tfdml import importance, masks

SIZES = np.array([2, 3, 4, 6])  # unequal classes, every class >= 2 (no left-out class)
ALPHA = 1.0


def full_pair_losses(emb, labels, eta):
    """ℓ_ij = Y_ij g(D_ij) + (1 − Y_ij) η_ij h(D_ij), g = D², h = max(0, α − D)² (Hong Eq. 10, 4)."""
    N = len(labels)
    loss = np.zeros((N, N))
    for i in range(N):
        for j in range(N):
            if i == j:
                continue
            d = np.linalg.norm(emb[i] - emb[j])
            if labels[i] == labels[j]:
                loss[i, j] = d**2
            else:
                loss[i, j] = eta(i, j) * max(0.0, ALPHA - d) ** 2
    return loss


def margin_pair_losses(emb, labels, alpha=0.2, beta=0.9, nu=0.1):
    """Wu et al. §4 per pair, with its ν β term: (α + y_ij (D_ij − β))_+ + ν β, y = ±1."""
    d = np.linalg.norm(emb[:, None] - emb[None], axis=-1)
    same = labels[:, None] == labels[None, :]
    loss = np.where(same, np.maximum(alpha + d - beta, 0), np.maximum(alpha - d + beta, 0)) + nu * beta
    np.fill_diagonal(loss, 0.0)
    return loss


def contrastive_l2_pair_losses(emb, labels):
    """Draft Eq. 18 per pair: D_ij (positive), [α − D_ij]_+ (negative)."""
    d = np.linalg.norm(emb[:, None] - emb[None], axis=-1)
    same = labels[:, None] == labels[None, :]
    loss = np.where(same, d, np.maximum(ALPHA - d, 0))
    np.fill_diagonal(loss, 0.0)
    return loss


def binomial_pair_losses(emb, labels, alpha=2.0, beta=0.5, cost=25.0):
    """Yi et al.'s binomial deviance per pair on the cosine similarity s (Ustinova & Lempitsky's
    α, β, C): ln(1 + e^{−α(s − β)}) positive, ln(1 + e^{αC(s − β)}) negative. With
    balanced=False the loss is the mean of these terms, so Eq. 23's weights apply."""
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    s = unit @ unit.T
    same = labels[:, None] == labels[None, :]
    loss = np.where(same, np.log1p(np.exp(-alpha * (s - beta))), np.log1p(np.exp(alpha * cost * (s - beta))))
    np.fill_diagonal(loss, 0.0)
    return loss


def eta_one(i, j):
    return 1.0


def make_eta_balanced(labels, lam=2.0):
    """Hong Eq. 16: η_ij = λ/(L−1) · (N_{y_i} − 1)/N_{y_j}."""
    classes, counts = np.unique(labels, return_counts=True)
    size = dict(zip(classes, counts))
    L = len(classes)
    return lambda i, j: lam / (L - 1) * (size[labels[i]] - 1) / size[labels[j]]


_DRAWS = {}


def draws(design, labels, batches, seed=11):
    """example ids, W (via tfdml.importance.pair_weights) and scored-pair masks of K batches."""
    key = (repr(design), batches, seed)
    if key not in _DRAWS:
        ds = design.index_batches(labels, seed=seed).take(batches).batch(batches)
        cols = next(iter(ds))

        def one(row):
            W = importance.pair_weights(row)
            mask = masks.candidate_mask(row["label"], row.get("pair_id"))
            return W, mask

        W, mask = tf.vectorized_map(one, cols)
        _DRAWS[key] = (cols["example_id"].numpy(), W.numpy().astype(np.float64), mask.numpy())
    return _DRAWS[key]


def minibatch_losses(design, labels, pair_loss, batches):
    """Eq. 23 per batch: mean over scored ordered pairs of W_ij ℓ_ij (and of ℓ_ij alone)."""
    ids, W, mask = draws(design, labels, batches)
    ell = pair_loss[ids[:, :, None], ids[:, None, :]]
    scored = mask.sum(axis=(1, 2))
    weighted = (mask * W * ell).sum(axis=(1, 2)) / scored
    plain = (mask * ell).sum(axis=(1, 2)) / scored
    return weighted, plain


def block_mean_and_se(values, block):
    """Mean and its standard error from means of consecutive blocks (epochs for m-per-class)."""
    usable = len(values) // block * block
    means = values[:usable].reshape(-1, block).mean(axis=1)
    return means.mean(), means.std(ddof=1) / np.sqrt(len(means))


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(2)
    labels = np.repeat(np.arange(len(SIZES)), SIZES)[rng.permutation(SIZES.sum())].astype(np.int32)
    # A fixed embedding: class centres plus noise, so positive and negative losses differ.
    centres = rng.normal(size=(len(SIZES), 2)) * 0.6
    emb = centres[labels] + 0.3 * rng.normal(size=(len(labels), 2))
    return labels, emb


@pytest.mark.parametrize(
    "design,block",
    [
        (designs.GroupDesign(2, 2), 1),
        (designs.GroupDesign(3, 2), 1),
        (designs.PRandomDesign(0.5, pairs=3), 1),
        (designs.MPerClassDesign(2, 2), 2),  # 4 classes / 2 per batch: 2 batches per epoch
    ],
    ids=repr,
)
@pytest.mark.parametrize("eta_name", ["contrastive", "balanced", "contrastive_l2", "margin", "binomial_deviance"])
def test_weighted_minibatch_loss_is_unbiased_for_full_loss(problem, design, block, eta_name):
    """Hong Eq. 23 vs Eq. 10 for every pair term that takes importance=True:
    contrastive ℓ2² and its balanced η, contrastive ℓ2 (draft Eq. 18), margin (Wu §4), binomial
    deviance with balanced=False (Yi et al.). tests/tfdml/losses/test_hong_contrastive_losses.py
    and test_pair_weighting_losses.py check that each loss class computes exactly
    Σ W_ij ℓ_ij / #pairs on a batch, with W from the same columns."""
    labels, emb = problem
    if eta_name == "binomial_deviance":
        pair_loss = binomial_pair_losses(emb, labels)
    elif eta_name == "margin":
        pair_loss = margin_pair_losses(emb, labels)
    elif eta_name == "contrastive_l2":
        pair_loss = contrastive_l2_pair_losses(emb, labels)
    else:
        eta = eta_one if eta_name == "contrastive" else make_eta_balanced(labels)
        pair_loss = full_pair_losses(emb, labels, eta)
    # Group designs leave out classes smaller than m (documented): the target is then the
    # loss over the eligible examples' pairs. Eq. 10 / N(N-1): mean loss over ordered pairs.
    keep = SIZES[labels] >= getattr(design, "m", 2)
    N = int(keep.sum())
    full = pair_loss[keep][:, keep].sum() / (N * (N - 1))
    weighted, plain = minibatch_losses(design, labels, pair_loss, batches=20000)
    mean_w, se_w = block_mean_and_se(weighted, block)
    mean_p, se_p = block_mean_and_se(plain, block)
    assert abs(mean_w - full) < 4 * se_w, (mean_w, full, se_w)
    # Without the importance weights the batch average is biased (by many standard errors).
    assert abs(mean_p - full) > 10 * se_p, (mean_p, full, se_p)


def test_mean_weight_is_one(problem):
    """E_Q[W] = Σ P_U = 1: the constant kept in the columns (Eq. 24/25 exactly)."""
    labels, _ = problem
    ones = np.ones((len(labels), len(labels)))
    for design in (designs.GroupDesign(2, 2), designs.PRandomDesign(0.5, pairs=3)):
        weighted, _ = minibatch_losses(design, labels, ones, batches=20000)
        mean, se = block_mean_and_se(weighted, 1)
        assert abs(mean - 1.0) < 4 * se


# -- triplets: W_apn = w_triplet·N_a(N_a−1)·N_n, derived in tfdml.importance ------


def triplet_losses(emb, labels, margin=0.4):
    """ℓ_apn = [D_ap² − D_an² + α]_+ (FaceNet; Wu §3) for every ordered valid triplet, else 0."""
    d2 = np.sum((emb[:, None] - emb[None]) ** 2, axis=-1)
    ell = np.maximum(d2[:, :, None] - d2[:, None, :] + margin, 0.0)
    same = labels[:, None] == labels[None, :]
    valid = same[:, :, None] & ~same[:, None, :] & ~np.eye(len(labels), dtype=bool)[:, :, None]
    return ell, valid


def triplet_minibatch_losses(design, labels, ell, batches, seed=13):
    """Per batch: mean over the batch's valid ordered triplets of W·ℓ (and of ℓ alone)."""
    cols = next(iter(design.index_batches(labels, seed=seed).take(batches).batch(batches)))
    assert "w_triplet" in cols
    size = design.batch_size
    a, p, n = (x.reshape(-1) for x in np.meshgrid(*[np.arange(size)] * 3, indexing="ij"))

    def one(row):
        return importance.triplet_weights(row, a, p, n)

    W = tf.vectorized_map(one, cols).numpy().astype(np.float64)
    lab, ids = cols["label"].numpy(), cols["example_id"].numpy()
    valid = (lab[:, a] == lab[:, p]) & (lab[:, a] != lab[:, n]) & (a != p)[None]
    values = ell[ids[:, a], ids[:, p], ids[:, n]]
    count = valid.sum(axis=1)
    return (valid * W * values).sum(axis=1) / count, (valid * values).sum(axis=1) / count


@pytest.mark.parametrize(
    "design,block",
    [(designs.GroupDesign(2, 2), 1), (designs.GroupDesign(3, 2), 1),
     (designs.MPerClassDesign(2, 2), 2)],
    ids=repr,
)
def test_weighted_triplet_loss_is_unbiased_for_the_mean_over_all_triplets(problem, design, block):
    labels, emb = problem
    ell, valid = triplet_losses(emb, labels)
    keep = SIZES[labels] >= design.m  # eligible classes only, as for pairs
    sub = np.ix_(keep, keep, keep)
    full = ell[sub][valid[sub]].mean()
    weighted, plain = triplet_minibatch_losses(design, labels, ell, batches=20000)
    mean_w, se_w = block_mean_and_se(weighted, block)
    mean_p, se_p = block_mean_and_se(plain, block)
    assert abs(mean_w - full) < 4 * se_w, (mean_w, full, se_w)
    assert abs(mean_p - full) > 10 * se_p, (mean_p, full, se_p)


def test_mean_triplet_weight_is_one(problem):
    labels, _ = problem
    ones = np.ones((len(labels),) * 3)
    weighted, _ = triplet_minibatch_losses(designs.GroupDesign(2, 2), labels, ones, batches=20000)
    mean, se = block_mean_and_se(weighted, 1)
    assert abs(mean - 1.0) < 4 * se


# -- histograms (HistogramLoss, importance=True): ratio estimators -----------------


def pair_histogram_terms(emb, labels, num_bins=5):
    """δ_ijr (Ustinova & Lempitsky Eq. 2) of the cosine similarity of every ordered pair, [N, N, R],
    and the positive-pair mask."""
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    sim = np.clip(unit @ unit.T, -1.0, 1.0)
    nodes = np.linspace(-1.0, 1.0, num_bins)
    delta = np.maximum(0.0, 1.0 - np.abs(sim[..., None] - nodes) / (nodes[1] - nodes[0]))
    return delta, labels[:, None] == labels[None, :]


@pytest.mark.parametrize(
    "design,block",
    [
        (designs.GroupDesign(2, 2), 1),
        (designs.GroupDesign(3, 2), 1),
        (designs.PRandomDesign(0.5, pairs=3), 1),
        (designs.MPerClassDesign(2, 2), 2),
    ],
    ids=repr,
)
def test_weighted_histograms_are_consistent_ratio_estimators(problem, design, block):
    """HistogramLoss(importance=True) fills h±_r = Σ W_ij δ_ijr / Σ W_ij over the batch's
    positive (negative) pairs (tests/tfdml/losses/test_histogram_loss.py). Pooled over
    batches, Σ_b numerator / Σ_b denominator tends to the histogram of all positive
    (negative) pairs of the training split, since E[Σ W ℓ] is a constant times the mean of ℓ
    over all pairs: within 4 standard errors (delta method) in every bin. Without W the
    pooled histograms miss it by many standard errors."""
    labels, emb = problem
    delta, same = pair_histogram_terms(emb, labels)
    keep = SIZES[labels] >= getattr(design, "m", 2)
    off_diagonal = ~np.eye(len(labels), dtype=bool)
    ids, W, mask = draws(design, labels, 20000)
    rows, cols = ids[:, :, None], ids[:, None, :]
    batch_delta, batch_same = delta[rows, cols], same[rows, cols]
    for positive in (True, False):
        population = (same == positive) & off_diagonal & keep[:, None] & keep[None, :]
        target = delta[population].mean(axis=0)
        selected = mask & (batch_same == positive)
        for weights, biased in ((W, False), (np.ones_like(W), True)):
            numerator = np.einsum("bij,bijr->br", selected * weights, batch_delta)
            denominator = (selected * weights).sum(axis=(1, 2))
            ratio = numerator.sum(axis=0) / denominator.sum()
            linearised = (numerator - ratio * denominator[:, None]) / denominator.mean()
            errors = np.array([abs(ratio[r] - target[r]) / block_mean_and_se(linearised[:, r], block)[1]
                               for r in range(len(target)) if block_mean_and_se(linearised[:, r], block)[1] > 0])
            if biased:
                assert errors.max() > 10, (positive, errors)
            else:
                assert errors.max() < 4, (positive, errors)
