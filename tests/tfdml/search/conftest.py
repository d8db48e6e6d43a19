"""Data shared by the search tests (exposed through the ``search_data`` fixture)."""

import types

import numpy as np
import pytest

from tfdml.search import Index


def _random(seed=0, n=150, q=40, dim=8):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, dim)).astype(np.float32), rng.standard_normal(
        (q, dim)).astype(np.float32)


def _clustered(seed=1, classes=6, per=20, q=30, dim=5):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((classes, dim)) * 4
    g = centres.repeat(per, axis=0) + 0.3 * rng.standard_normal((classes * per, dim))
    qs = centres[rng.integers(0, classes, q)] + 0.3 * rng.standard_normal((q, dim))
    return g.astype(np.float32), qs.astype(np.float32)


def _five_queries():
    """Nearest distances 1..5 to the class-0 entry (class 1 is 100 away); the
    queries at 2 and 5 carry class 1, so they are wrong. By hand, at t = 1..5:
    precision 1, 1/2, 2/3, 3/4, 3/5; recall 1/3, 1/3, 2/3, 1, 1;
    F1 1/2, 2/5, 2/3, 6/7, 3/4."""
    index = Index().add(np.array([[0.0, 0.0], [100.0, 0.0]]), ["a", "b"], labels=[0, 1])
    queries = np.array([[d, 0.0] for d in (1, 2, 3, 4, 5)], np.float32)
    return index, queries, np.array([0, 1, 0, 0, 1])


@pytest.fixture(scope="session")
def search_data():
    return types.SimpleNamespace(random=_random, clustered=_clustered, five_queries=_five_queries)
