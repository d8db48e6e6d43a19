"""The distances tfdml knows, by name, and which of them are similarities.

One table, without TensorFlow, so that every part decides the same way:
:mod:`tfdml.distances` (the TF functions), the losses (a similarity s is used
as the distance 1 − s), the retrieval metrics and search (:mod:`tfdml.metrics.knn`,
:mod:`tfdml.search`), verification pairs and plots. A *similarity* is larger
for closer items (cosine, Lu et al. 2019 §3.1); a *distance* is smaller.
"""

#: Every distance name a loss, a sampler or a metric accepts.
DISTANCES = ("euclidean", "squared_euclidean", "cosine")

#: The names among :data:`DISTANCES` whose values are similarities.
SIMILARITIES = ("cosine",)


def is_similarity(name):
    """True when larger values of the named distance mean closer (cosine)."""
    return name in SIMILARITIES
