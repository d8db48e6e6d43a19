"""The checks of a loss's constructor arguments and of how Keras calls it, with the
errors that name the fix."""

import re

from tfdml import distance_names


def check_distance(distance):
    """``distance`` if it names one of :data:`tfdml.distances.DISTANCES` (a name, so the loss
    can be serialised), else :func:`tfdml.distance_names.check`'s error."""
    return distance_names.check(distance, hint=" (a name, so that the loss can be saved)")

def scope_name(name):
    """``name`` as a TensorFlow root name scope (``[A-Za-z0-9.][A-Za-z0-9_.\\-/>]*``): any
    other character becomes ``_``, a leading ``_``/``-``/``/``/``>`` is dropped; ``"loss"`` if
    nothing is left. Keras names a loss after its class, so a class ``_Private`` is named
    ``__private``, which TensorFlow refuses as a root scope in graph mode."""
    cleaned = re.sub(r"[^A-Za-z0-9_.\-/>]", "_", str(name)).lstrip("_-/>")
    return cleaned or "loss"


def refuse_sample_weight(owner):
    """Raise the one error for a per-example ``sample_weight`` given to a tuple loss.

    A tfdml loss is a sum over tuples (pairs, triplets, N-pair sets) that span
    examples, so a weight per example has no single meaning (anchor only? every
    member?); it is refused rather than applied to the scalar or dropped.
    """
    raise ValueError(
        f"{owner} scores tuples of examples, not single examples, and takes no per-example "
        "sample_weight; remove sample_weight from fit() (or from the dataset's third "
        "element), and weight tuples through the batch design's importance columns "
        "(see tfdml.targets and tfdml.importance) instead."
    )


#: Keras reductions that leave one scalar as it is; "none" / None ask for per-sample values.
SCALAR_REDUCTIONS = ("sum_over_batch_size", "sum", "mean", "mean_with_sample_weight")


def check_scalar_reduction(owner, reduction):
    """Refuse a Keras ``reduction`` that asks for per-sample values.

    A tfdml loss reduces its per-tuple terms itself (``tuple_reduction``) and
    returns one scalar, which every Keras reduction in :data:`SCALAR_REDUCTIONS`
    leaves unchanged. ``"none"`` (or None) would silently return that scalar
    where per-sample values are expected, so it is refused."""
    if reduction in SCALAR_REDUCTIONS:
        return
    raise ValueError(
        f"{owner}(reduction={reduction!r}): a tfdml loss returns one value over tuples of "
        "examples (pairs, triplets), not one per example, so Keras' per-sample reduction has "
        "nothing to return. Leave reduction at its default; choose how tuples are averaged with "
        "tuple_reduction (tfdml.losses.reductions.REDUCTIONS), and get per-tuple values from the "
        "loss's terms (e.g. TripletLoss.tuple_terms)."
    )


def refuse_fixed(owner, kwargs, **reasons):
    """Refuse a base argument that the loss ``owner`` fixes itself: ``reasons`` maps each
    such argument name to why (``distance="scores dot products ..."``)."""
    for name, reason in reasons.items():
        if name in kwargs:
            raise ValueError(f"{owner} {reason} and takes no {name}; remove {name}.")


def check_positive(name, value, allow_zero=False):
    try:
        ok = float(value) >= 0 if allow_zero else float(value) > 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a number {bound}, got {value!r}.")
    return float(value)
