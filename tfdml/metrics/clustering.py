"""Clustering quality of embeddings: k-means, then NMI, AMI and pairwise F1.

Protocol of Wu et al. 2017 §5, Lu et al. 2019 §4.3 and Duan et al. 2019 §4:
cluster the test embeddings with k-means into as many clusters as there are
classes, and compare the clusters Ω with the ground-truth classes C.

* **NMI**. Wu §5 writes ``I(Ω, C) / sqrt(H(Ω) H(C))`` (geometric mean);
  Duan §4 writes ``2 I(Ω; C) / (H(Ω) + H(C))`` (arithmetic mean, also
  scikit-learn's default). ``average="arithmetic"`` (default) or
  ``"geometric"`` picks one; the two differ when H(Ω) != H(C).
* **AMI**, adjusted mutual information (Vinh et al. 2010, JMLR 11, Eq. 24):
  ``(I - E[I]) / (avg(H(Ω), H(C)) - E[I])``, NMI corrected for chance (about
  0 for random clusters, where NMI stays above 0 with many clusters);
  the same ``average`` as NMI.
* **F1** (Song et al. 2016, cited by Lu [29] and Duan): over pairs of
  examples, precision = same-cluster pairs that are same-class / same-cluster
  pairs, recall = same-cluster pairs that are same-class / same-class pairs,
  ``F1 = 2PR / (P + R)`` (Duan §4).

k-means is scikit-learn's, seeded, so the same embeddings give the same score.
It runs with one BLAS thread: its k-means++ initialisation multiplies the
embeddings by a handful of candidate centres at a time, products too small
for BLAS threads, which wait for a core whenever the machine is busy (figures:
benchmarks/RESULTS.md, "NMI's k-means"). BLAS threads split a product's
output, not its sums, so the clusters do not change; the assignment steps keep
their OpenMP threads.
"""

import numpy as np

NMI_AVERAGES = ("arithmetic", "geometric")


def kmeans(embeddings, num_clusters, seed=0, n_init=1):
    """Cluster ids [N] from scikit-learn k-means (k-means++ init, ``seed``)."""
    embeddings = np.asarray(embeddings, np.float32)
    num_clusters = int(num_clusters)
    if not 1 <= num_clusters <= embeddings.shape[0]:
        raise ValueError(
            f"k-means needs 1 <= num_clusters <= num_examples, got {num_clusters} clusters "
            f"for {embeddings.shape[0]} examples."
        )
    # on use: importing tfdml does not import scikit-learn
    from sklearn import cluster as _cluster
    from threadpoolctl import threadpool_limits

    km = _cluster.KMeans(n_clusters=num_clusters, n_init=n_init, random_state=seed)
    with threadpool_limits(limits=1, user_api="blas"):
        return km.fit_predict(embeddings)


def nmi(labels, clusters, average="arithmetic"):
    """Normalised mutual information between classes and clusters (see module doc)."""
    if average not in NMI_AVERAGES:
        raise ValueError(f"Unknown NMI average {average!r}; choose one of {NMI_AVERAGES}.")
    from sklearn import metrics as _skm

    return float(_skm.normalized_mutual_info_score(labels, clusters, average_method=average))


def ami(labels, clusters, average="arithmetic"):
    """Adjusted mutual information between classes and clusters (see module doc)."""
    if average not in NMI_AVERAGES:
        raise ValueError(f"Unknown NMI average {average!r}; choose one of {NMI_AVERAGES}.")
    from sklearn import metrics as _skm

    return float(_skm.adjusted_mutual_info_score(labels, clusters, average_method=average))


#: Metric names computed from one k-means clustering.
CLUSTER_METRICS = ("nmi", "ami", "f1")


def pairwise_f1(labels, clusters):
    """Pair-counting F1 of a clustering (Song et al. 2016; Duan §4 ``F1 = 2PR/(P+R)``)."""
    _, y = np.unique(np.asarray(labels).reshape(-1), return_inverse=True)
    _, c = np.unique(np.asarray(clusters).reshape(-1), return_inverse=True)
    table = np.zeros((y.max() + 1, c.max() + 1), np.int64)
    np.add.at(table, (y, c), 1)

    def pairs(n):
        n = n.astype(np.float64)
        return np.sum(n * (n - 1) / 2)

    true_pos = pairs(table)
    same_cluster = pairs(table.sum(axis=0))
    same_class = pairs(table.sum(axis=1))
    precision = true_pos / same_cluster if same_cluster else 0.0
    recall = true_pos / same_class if same_class else 0.0
    if precision + recall == 0:
        return 0.0
    return float(2 * precision * recall / (precision + recall))


def clustering_metrics(embeddings, labels, metrics=("nmi", "f1"), num_clusters=None, seed=0,
                       nmi_average="arithmetic", n_init=1):
    """``{"nmi": ..., "ami": ..., "f1": ...}`` (as requested) of one k-means clustering with
    ``num_clusters`` (default: number of classes); ``nmi_average`` serves NMI and AMI."""
    labels = np.asarray(labels).reshape(-1)
    if num_clusters is None:
        num_clusters = np.unique(labels).size
    clusters = kmeans(embeddings, num_clusters, seed=seed, n_init=n_init)
    out = {}
    if "nmi" in metrics:
        out["nmi"] = nmi(labels, clusters, nmi_average)
    if "ami" in metrics:
        out["ami"] = ami(labels, clusters, nmi_average)
    if "f1" in metrics:
        out["f1"] = pairwise_f1(labels, clusters)
    return out
