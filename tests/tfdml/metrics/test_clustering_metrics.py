"""NMI (Wu §5 geometric / Duan §4 arithmetic) and pairwise F1 (Song et al.; Duan §4)."""

import itertools

import numpy as np
import pytest

from tfdml.metrics import clustering


def nmi_from_formula(labels, clusters, average):
    """I(Ω, C) / sqrt(H(Ω) H(C)) (Wu §5) or 2 I(Ω; C) / (H(Ω) + H(C)) (Duan §4)."""
    n = labels.size
    classes, clus = np.unique(labels), np.unique(clusters)
    p = np.array([[np.sum((labels == a) & (clusters == b)) for b in clus] for a in classes]) / n
    pa, pb = p.sum(1), p.sum(0)
    nz = p > 0
    mutual = np.sum(p[nz] * np.log(p[nz] / np.outer(pa, pb)[nz]))
    ha = -np.sum(pa * np.log(pa))
    hb = -np.sum(pb * np.log(pb))
    if average == "geometric":
        return mutual / np.sqrt(ha * hb)
    return 2 * mutual / (ha + hb)


def f1_brute_force(labels, clusters):
    """F1 = 2PR/(P+R) over all unordered pairs of examples (Duan §4)."""
    tp = fp = fn = 0
    for i, j in itertools.combinations(range(labels.size), 2):
        same_class, same_cluster = labels[i] == labels[j], clusters[i] == clusters[j]
        tp += same_class and same_cluster
        fp += same_cluster and not same_class
        fn += same_class and not same_cluster
    p, r = tp / (tp + fp), tp / (tp + fn)
    return 2 * p * r / (p + r)


@pytest.mark.parametrize("average", ["arithmetic", "geometric"])
def test_nmi_equals_formula(average):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, 80)
    clusters = np.where(rng.random(80) < 0.6, labels, rng.integers(0, 7, 80))
    assert clustering.nmi(labels, clusters, average) == pytest.approx(
        nmi_from_formula(labels, clusters, average), abs=1e-10)


def test_pairwise_f1_equals_brute_force():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 4, 60)
    clusters = np.where(rng.random(60) < 0.5, labels, rng.integers(0, 6, 60))
    assert clustering.pairwise_f1(labels, clusters) == pytest.approx(
        f1_brute_force(labels, clusters), abs=1e-12)


def test_pairwise_f1_hand_case():
    # classes {0,1,2} {3,4}; clusters {0,1} {2,3,4}: same-cluster pairs 1 + 3 = 4,
    # of which same-class: (0,1), (3,4) = 2 -> P = 1/2; same-class pairs 3 + 1 = 4 -> R = 1/2.
    assert clustering.pairwise_f1([0, 0, 0, 1, 1], [5, 5, 7, 7, 7]) == pytest.approx(0.5)


def test_kmeans_on_separated_blobs_is_perfect_and_seeded():
    rng = np.random.default_rng(2)
    labels = np.repeat(np.arange(4), 15)
    centers = rng.standard_normal((4, 3)) * 20
    x = (centers[labels] + rng.standard_normal((60, 3)) * 0.1).astype(np.float32)
    out = clustering.clustering_metrics(x, labels, seed=3)
    assert out == {"nmi": pytest.approx(1.0), "f1": pytest.approx(1.0)}
    noisy = rng.standard_normal((60, 3)).astype(np.float32)
    a = clustering.kmeans(noisy, 4, seed=5)
    np.testing.assert_array_equal(a, clustering.kmeans(noisy, 4, seed=5))


def test_kmeans_runs_with_one_blas_thread_and_finds_scikit_learns_clusters(monkeypatch):
    """The k-means++ products are too small for BLAS threads: k-means runs with one, and its
    clusters are those of scikit-learn's KMeans with the same seed and free threads."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_info

    rng = np.random.default_rng(4)
    labels = np.repeat(np.arange(60), 40)
    x = rng.standard_normal((60, 32))[labels] + rng.standard_normal((len(labels), 32))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    reference = KMeans(n_clusters=60, n_init=1, random_state=7).fit_predict(x)
    threads = []
    fit_predict = KMeans.fit_predict

    def recording(self, *args, **kwargs):
        threads.extend(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
        return fit_predict(self, *args, **kwargs)

    monkeypatch.setattr(KMeans, "fit_predict", recording)
    clusters = clustering.kmeans(x, 60, seed=7)
    assert threads and set(threads) == {1}
    # the same clusters (NMI 1 between the two clusterings; a margin for a machine whose BLAS
    # rounds a product differently with one thread)
    assert clustering.nmi(reference, clusters) > 0.99


def test_bad_arguments():
    with pytest.raises(ValueError, match="NMI average"):
        clustering.nmi([0, 1], [0, 1], "max-ish")
    with pytest.raises(ValueError, match="num_clusters"):
        clustering.kmeans(np.zeros((3, 2)), 5)


@pytest.mark.parametrize("average", ["arithmetic", "geometric"])
def test_ami_equals_sklearn_on_the_same_kmeans_clusters_computed_once(monkeypatch, average):
    """AMI (Vinh et al. 2010) corrects NMI for chance; NMI, AMI and F1 share one k-means."""
    from sklearn.metrics import adjusted_mutual_info_score

    rng = np.random.default_rng(4)
    labels = rng.integers(0, 6, 90)
    x = (rng.standard_normal((6, 3))[labels] * 1.5 + rng.standard_normal((90, 3))).astype(np.float32)
    clusters = clustering.kmeans(x, 6, seed=2)
    calls = []
    kmeans = clustering.kmeans
    monkeypatch.setattr(clustering, "kmeans", lambda *a, **k: calls.append(1) or kmeans(*a, **k))
    out = clustering.clustering_metrics(x, labels, ("nmi", "ami", "f1"), seed=2, nmi_average=average)
    assert len(calls) == 1
    assert out["ami"] == pytest.approx(
        adjusted_mutual_info_score(labels, clusters, average_method=average), abs=1e-12)
    assert out["nmi"] == clustering.nmi(labels, clusters, average)
    assert out["ami"] < out["nmi"]  # the chance correction lowers it on a partial clustering
    # Random clusters: NMI stays above 0, AMI is near 0.
    random = rng.integers(0, 6, 90)
    assert abs(clustering.ami(labels, random)) < 0.05 < clustering.nmi(labels, random)
