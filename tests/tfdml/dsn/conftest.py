"""Shared NumPy references for the DSN tests (written from Duan et al. 2019 Eq. 4, 5, 9)."""

import types

import numpy as np
import pytest


def softmax_masked(logits, mask):
    """Eq. 4 over the masked entries of one row (NumPy)."""
    z = np.where(mask, logits, -np.inf)
    z = z - z[mask].max()
    e = np.where(mask, np.exp(z), 0.0)
    return e / e.sum()


def triplet_table(pos_logits, cls_logits, neg_logits, labels, anchor):
    """p(p, c(n), n | a) of Eq. 5 for one anchor, as a dict {(p, n): prob}.

    ``pos_logits``/``cls_logits``: [P] raw logits of the first network for this
    anchor; ``neg_logits``: [P, P] raw logits of the second network, row p = positive.
    """
    labels = np.asarray(labels)
    size = len(labels)
    first = {}
    for i in range(size):
        first.setdefault(labels[i], i)
    reps = np.array([first[labels[i]] == i for i in range(size)])
    pos_mask = (labels == labels[anchor]) & (np.arange(size) != anchor)
    cls_mask = reps & (labels != labels[anchor])
    pi_pos = softmax_masked(pos_logits, pos_mask)
    pi_cls = softmax_masked(cls_logits, cls_mask)
    table = {}
    for p in np.flatnonzero(pos_mask):
        for c in np.flatnonzero(cls_mask):
            members = labels == labels[c]
            pi_neg = softmax_masked(neg_logits[p], members)
            for n in np.flatnonzero(members):
                table[(p, n)] = pi_pos[p] * pi_cls[c] * pi_neg[n]
    return table


def anchor_distribution(labels):
    """q(a): a class uniformly among those with >= 2 examples, then a member uniformly."""
    labels = np.asarray(labels)
    classes, counts = np.unique(labels, return_counts=True)
    eligible = {c: n for c, n in zip(classes, counts) if n >= 2}
    q = np.zeros(len(labels))
    for i, y in enumerate(labels):
        if y in eligible:
            q[i] = 1.0 / len(eligible) / eligible[y]
    return q


@pytest.fixture
def dsnref():
    return types.SimpleNamespace(
        softmax_masked=softmax_masked,
        triplet_table=triplet_table,
        anchor_distribution=anchor_distribution,
    )
