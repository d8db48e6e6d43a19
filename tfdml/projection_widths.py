"""The widths of a projection head (:mod:`tfdml.projection_head`), checked without
TensorFlow: the one check that :class:`tfdml.models.EmbeddingModel` and the config
reader (``model.projection_head``, before TensorFlow is imported) share.

No imports.
"""

#: How a projection head's widths are written, shown in every refusal.
WIDTHS_FORM = ("a list of positive layer widths, the hidden layers' and last the output's, "
               "e.g. [128, 64] (SimCLR: one hidden layer and the output); null: no head")


def widths_problem(widths):
    """What is wrong with ``widths`` as a projection head's widths (not None), or None when
    it is a non-empty list or tuple of positive integers."""
    if not isinstance(widths, (list, tuple)) or not widths:
        return f"must be {WIDTHS_FORM}"
    bad = [w for w in widths if isinstance(w, bool) or not isinstance(w, int) or w < 1]
    if bad:
        return f"has widths that are not positive integers ({', '.join(map(repr, bad))}): it must be {WIDTHS_FORM}"
    return None


def check_widths(widths):
    """``widths`` as a tuple of ints, or None for None (no head); raises ``ValueError``
    naming the problem and the form (:data:`WIDTHS_FORM`)."""
    if widths is None:
        return None
    problem = widths_problem(widths)
    if problem:
        raise ValueError(f"projection_head={widths!r} {problem}.")
    return tuple(int(w) for w in widths)
