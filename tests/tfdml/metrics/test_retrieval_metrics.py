"""Rank-based retrieval metrics against brute-force rankings (Lu Eq. 2, Musgrave MAP@R)."""

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from tfdml import kernels
from tfdml.metrics import retrieval
from tfdml.metrics.retrieval import retrieval_metrics

ALL = ("recall", "precision", "map@r", "r_precision", "map", "mrr")


def brute_rankings(query, q_labels, gallery, g_labels, distance):
    """Full ranking per query: score descending, ties negative-first, then index."""
    leave_one_out = gallery is None
    if leave_one_out:
        gallery, g_labels = query, q_labels
    q = query.astype(np.float64)
    g = gallery.astype(np.float64)
    if distance == "cosine":
        s = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (
            g / np.linalg.norm(g, axis=1, keepdims=True)).T
    else:
        s = -np.sum((q[:, None] - g[None]) ** 2, axis=-1)
    rows = []
    for i in range(q.shape[0]):
        cand = np.array([j for j in range(g.shape[0]) if not (leave_one_out and j == i)])
        rel = g_labels[cand] == q_labels[i]
        order = np.lexsort((cand, rel, -s[i, cand]))  # last key is primary
        rows.append((rel[order], s[i, cand]))
    return rows


def brute_metrics(rows, ks):
    """Metrics from the relevance vector of each ranking, written from the definitions."""
    vals = {f"recall@{k}": [] for k in ks}
    vals.update({f"precision@{k}": [] for k in ks})
    vals.update({"map@r": [], "r_precision": [], "map": [], "mrr": []})
    excluded = 0
    for rel, _ in rows:
        R = int(rel.sum())
        if R == 0:
            excluded += 1
            continue
        n = rel.size
        P = np.cumsum(rel) / np.arange(1, n + 1)  # P(i): precision at i
        for k in ks:
            vals[f"recall@{k}"].append(float(rel[:k].any()))
            vals[f"precision@{k}"].append(rel[:k].sum() / min(k, n))  # Lu Eq. 2
        vals["r_precision"].append(rel[:R].sum() / R)
        vals["map@r"].append(np.sum(P[:R] * rel[:R]) / R)  # MAP@R, Musgrave et al.
        vals["map"].append(np.sum(P * rel) / R)
        vals["mrr"].append(1.0 / (np.argmax(rel) + 1))  # first correct neighbour
    out = {k: float(np.mean(v)) for k, v in vals.items()}
    return out, excluded


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 12, 90)
    labels[:3] = [100, 101, 102]  # three single-example classes
    x = rng.standard_normal((90, 5)).astype(np.float32)
    gallery_labels = rng.integers(0, 14, 70)  # classes 12, 13 only in the gallery
    g = rng.standard_normal((70, 5)).astype(np.float32)
    return x, labels, g, gallery_labels


KS = (1, 2, 5, 1000)


@pytest.mark.parametrize("distance", ["euclidean", "cosine"])
@pytest.mark.parametrize("loo", [True, False])
def test_metrics_equal_brute_force(data, distance, loo):
    x, labels, g, gl = data
    gallery, gallery_labels = (None, None) if loo else (g, gl)
    ref, excluded = brute_metrics(brute_rankings(x, labels, gallery, gallery_labels, distance), KS)
    got = retrieval_metrics(x, labels, gallery, gallery_labels, metrics=ALL, ks=KS,
                            distance=distance, chunk_size=11)
    for key, value in ref.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key
    assert got["num_excluded_queries"] == excluded
    assert got["num_queries"] == x.shape[0] - excluded
    if loo:
        assert excluded == 3  # the three single-example classes


def test_chunked_equals_unchunked(data):
    x, labels, g, gl = data
    full = retrieval_metrics(x, labels, metrics=ALL, ks=KS, chunk_size=x.shape[0])
    ids, _ = retrieval.encode_labels(labels)

    def ranks(chunk):
        return np.concatenate([r for _, r, _ in retrieval.positive_ranks(
            x, ids, chunk_size=chunk)])

    full_ranks = ranks(x.shape[0])
    for chunk in (1, 4, 13):
        np.testing.assert_array_equal(ranks(chunk), full_ranks)  # integer ranks: exact
        got = retrieval_metrics(x, labels, metrics=ALL, ks=KS, chunk_size=chunk)
        assert got == pytest.approx(full, abs=1e-12)


def test_map_equals_sklearn_average_precision(data):
    x, labels, g, gl = data
    rows = brute_rankings(x, labels, g, gl, "euclidean")
    aps = [average_precision_score(rel_sorted_back, s)
           for rel_sorted_back, s in (
               (gl == labels[i], scores) for i, (_, scores) in enumerate(rows))
           if rel_sorted_back.any()]
    got = retrieval_metrics(x, labels, g, gl, metrics=("map",))
    assert got["map"] == pytest.approx(np.mean(aps), abs=1e-12)


def test_hand_computed_map_at_r():
    # One query at 0; gallery on a line at distances 1..5 with classes A B A B A.
    # R = 3; top-3 relevance [1, 0, 1]:
    #   MAP@R = (1/3)(1/1 + 0 + 2/3) = 5/9, R-Precision = 2/3,
    #   AP = (1/3)(1/1 + 2/3 + 3/5) = 34/45, Precision@2 = 1/2, Recall@1 = 1.
    q = np.zeros((1, 1), np.float32)
    g = np.arange(1, 6, dtype=np.float32)[:, None]
    gl = np.array([0, 1, 0, 1, 0])
    got = retrieval_metrics(q, [0], g, gl, metrics=ALL, ks=(1, 2))
    assert got["map@r"] == pytest.approx(5 / 9)
    assert got["r_precision"] == pytest.approx(2 / 3)
    assert got["map"] == pytest.approx(34 / 45)
    assert got["precision@2"] == pytest.approx(1 / 2)
    assert got["recall@1"] == 1.0
    assert got["mrr"] == 1.0
    # From 3.5 the nearest are 3 (A) and 4 (B), both at 0.5: the tied negative goes first,
    # so the first positive is second: MRR = 1/2.
    got = retrieval_metrics(np.full((1, 1), 3.5, np.float32), [0], g, gl, metrics=("mrr",))
    assert got["mrr"] == 1 / 2


def test_ties_rank_negatives_first():
    # Positive at +1, negative at -1: same distance. Pessimistic ties: the
    # positive is second, so Recall@1 = 0, MAP@R (R = 1) = 0, AP = 1/2.
    q = np.zeros((1, 1), np.float32)
    g = np.array([[1.0], [-1.0]], np.float32)
    got = retrieval_metrics(q, [0], g, [0, 1], metrics=ALL, ks=(1, 2))
    assert got["recall@1"] == 0.0 and got["recall@2"] == 1.0
    assert got["map@r"] == 0.0 and got["map"] == pytest.approx(0.5)
    assert got["mrr"] == 0.5


def test_single_example_classes_are_excluded_and_counted():
    x = np.random.default_rng(0).standard_normal((6, 2)).astype(np.float32)
    got = retrieval_metrics(x, [0, 0, 1, 2, 3, 4], metrics=ALL, ks=(1,))
    assert got["num_queries"] == 2 and got["num_excluded_queries"] == 4
    only_singletons = retrieval_metrics(x, np.arange(6), metrics=("map@r",))
    assert np.isnan(only_singletons["map@r"])
    assert only_singletons["num_excluded_queries"] == 6


def test_k_larger_than_gallery():
    x = np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32)
    got = retrieval_metrics(x, [0, 0, 1, 1], metrics=("recall", "precision"), ks=(50,))
    assert got["recall@50"] == 1.0
    assert got["precision@50"] == pytest.approx(1 / 3)  # one positive among 3 retrievable


def test_pr_curve_matches_brute_force(data):
    x, labels, _, _ = data
    levels = np.linspace(0, 1, 11)
    got = retrieval_metrics(x, labels, metrics=("map",), pr_levels=levels, chunk_size=9)
    curves = []
    for rel, _ in brute_rankings(x, labels, None, None, "euclidean"):
        R = rel.sum()
        if R == 0:
            continue
        prec = np.cumsum(rel) / np.arange(1, rel.size + 1)
        rec = np.cumsum(rel) / R
        curves.append([prec[rec >= lv].max() for lv in levels])
    np.testing.assert_allclose(got["pr_curve"][1], np.mean(curves, axis=0), atol=1e-12)


def test_bad_inputs():
    x = np.zeros((4, 2), np.float32)
    with pytest.raises(ValueError, match="Unknown retrieval metric"):
        retrieval_metrics(x, [0, 0, 1, 1], metrics=("nope",))
    with pytest.raises(ValueError, match="labels"):
        retrieval_metrics(x, [0, 0, 1], metrics=("map",))
    with pytest.raises(ValueError, match="ks"):
        retrieval_metrics(x, [0, 0, 1, 1], ks=(0,))
    with pytest.raises(ValueError, match="gallery_labels"):
        retrieval_metrics(x, [0, 0, 1, 1], gallery=x)


def test_positive_table():
    table = retrieval._positive_table(np.array([2, 0, 2, 1, 2]), 4)
    np.testing.assert_array_equal(table, [[1, -1, -1], [3, -1, -1], [0, 2, 4], [-1, -1, -1]])


@pytest.mark.parametrize("form", ["sorting", "counting", "reference"])
def test_large_classes_every_form_equals_brute_force(form):
    # 69 positives per query, counted by every form of the chunk counts
    # (tfdml.kernels.retrieval; tests/tfdml/kernels compares the forms directly).
    rng = np.random.default_rng(5)
    labels = np.repeat([0, 1], 70)
    x = rng.standard_normal((140, 3)).astype(np.float32)
    ref, _ = brute_metrics(brute_rankings(x, labels, None, None, "euclidean"), (1, 10))
    with kernels.forced(form):
        got = retrieval_metrics(x, labels, metrics=ALL, ks=(1, 10), chunk_size=9)
    for key, value in ref.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key


@pytest.mark.parametrize("loo", [True, False])
def test_unit_vectors_give_the_same_metrics_by_cosine_and_euclidean(loo):
    """Exact duplicates across classes are ties; both distances rank on the
    same scores, so the metrics are equal, and equal the pessimistic-tie reference."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(240, 8)).astype(np.float32)
    x = (x / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)).astype(np.float32)
    labels = rng.integers(0, 20, 240)
    x[rng.permutation(240)[:80]] = x[rng.integers(0, 240, 80)]  # duplicates, often of another class
    query, q_labels, gallery, g_labels = ((x, labels, None, None) if loo
                                          else (x[:80], labels[:80], x[80:], labels[80:]))
    got = {d: retrieval_metrics(query, q_labels, gallery, g_labels, ks=(1, 4), distance=d)
           for d in ("euclidean", "cosine", "squared_euclidean")}
    assert got["euclidean"] == got["cosine"] == got["squared_euclidean"]
    ref, _ = brute_metrics(brute_rankings(query, q_labels, gallery, g_labels, "cosine"), (1, 4))
    for name in ("recall@1", "recall@4", "map@r", "r_precision"):
        assert got["cosine"][name] == pytest.approx(ref[name], abs=1e-12), name


@pytest.mark.parametrize("form", ["counting", "reference"])
@pytest.mark.parametrize("loo", [True, False])
def test_counting_path_with_a_padded_last_chunk_equals_brute_force(form, loo):
    """The counting form (the CPU's choice for small classes) and the reference, the query
    taken out of its own counts in leave-one-out, and a last chunk padded with rows that
    have no positives. (Ties: test_ties_rank_negatives_first.)"""
    rng = np.random.default_rng(11)
    labels = rng.integers(0, 6, 61)
    x = rng.standard_normal((61, 3)).astype(np.float32)
    g_labels = rng.integers(0, 6, 43)
    g = rng.standard_normal((43, 3)).astype(np.float32)
    gallery, gallery_labels = (None, None) if loo else (g, g_labels)
    # 61 queries in chunks of 7: the last chunk holds 5 and is padded with 2 rows
    ref, _ = brute_metrics(brute_rankings(x, labels, gallery, gallery_labels, "euclidean"), KS)
    with kernels.forced(form):
        got = retrieval_metrics(x, labels, gallery, gallery_labels, metrics=ALL, ks=KS, chunk_size=7)
    for key, value in ref.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key


def tied_data():
    """Small-integer points and their negations: the gallery's mean is exactly 0 and every
    score is an exact float32 integer, so the many equal distances are exact ties."""
    rng = np.random.default_rng(7)
    half = rng.integers(-2, 3, size=(40, 2)).astype(np.float32)
    x = np.concatenate([half, -half])
    labels = rng.integers(0, 5, 80)
    return x, labels


@pytest.mark.parametrize("form", ["sorting", "counting", "reference"])
@pytest.mark.parametrize("loo", [True, False])
def test_mrr_with_exact_ties_equals_brute_force_on_every_form(form, loo):
    """MRR = mean of 1 / r_1, r_1 the rank of the first positive, negatives tied with it
    first (as every retrieval metric here); every form of the chunk counts gives the
    same integer ranks, hence the same MRR."""
    x, labels = tied_data()
    # A separate gallery of symmetric pairs too (its mean is exactly 0).
    in_gallery = np.tile(np.arange(40) >= 15, 2)
    query, q_labels, gallery, g_labels = (
        (x, labels, None, None) if loo
        else (x[~in_gallery], labels[~in_gallery], x[in_gallery], labels[in_gallery]))
    rows = brute_rankings(query, q_labels, gallery, g_labels, "euclidean")
    ref, excluded = brute_metrics(rows, (1,))
    with kernels.forced(form):
        got = retrieval_metrics(query, q_labels, gallery, g_labels, metrics=("recall", "mrr"),
                                ks=(1,), chunk_size=7)
    assert got["mrr"] == pytest.approx(ref["mrr"], abs=1e-12)
    assert got["recall@1"] == pytest.approx(ref["recall@1"], abs=1e-12)
    # Ties do occur, and the brute force counts them pessimistically.
    scores = np.concatenate([s for _, s in rows])
    assert np.unique(scores).size < scores.size / 10
    assert ref["recall@1"] < ref["mrr"] < 1.0


@pytest.mark.parametrize("loo", [True, False])
def test_per_class_figures_are_the_means_over_each_class_queries(data, loo):
    x, labels, g, gl = data
    gallery, gallery_labels = (None, None) if loo else (g, gl)
    rows = brute_rankings(x, labels, gallery, gallery_labels, "euclidean")
    got = retrieval_metrics(x, labels, gallery, gallery_labels, metrics=("recall", "map@r", "mrr"),
                            ks=(1, 5), chunk_size=11, per_class=True)
    table = got["per_class"]
    classes = np.unique(labels)
    np.testing.assert_array_equal(table["class"], classes)
    for c, cls in enumerate(classes):
        members = [rows[i] for i in np.flatnonzero(labels == cls)]
        ref, excluded = brute_metrics(members, (1, 5))
        assert table["num_queries"][c] == len(members) - excluded
        assert table["num_excluded_queries"][c] == excluded
        for key in ("recall@1", "recall@5", "map@r", "mrr"):
            if excluded == len(members):  # a single-example class: nothing to score
                assert np.isnan(table[key][c])
            else:
                assert table[key][c] == pytest.approx(ref[key], abs=1e-12), (cls, key)
    # Weighted by their query counts, the classes give the overall figures.
    scored = table["num_queries"] > 0
    for key in ("recall@1", "map@r", "mrr"):
        overall = np.sum(table[key][scored] * table["num_queries"][scored]) / got["num_queries"]
        assert overall == pytest.approx(got[key], abs=1e-12)
