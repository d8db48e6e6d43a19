"""The distances tfdml knows, by name: what each name measures, which of them are
similarities, and the one check of a name.

One table, without TensorFlow, so that every part decides the same way:
:mod:`tfdml.distances` (the TF functions), the losses (a similarity s is used
as the distance 1 − s), the retrieval metrics and search (:mod:`tfdml.metrics.knn`,
:mod:`tfdml.search`), verification pairs and plots. A *similarity* is larger
for closer items (cosine, Lu et al. 2019 §3.1); a *distance* is smaller.

A name means one measure everywhere; what a part *reports* of it is fixed per
part and listed in :data:`REPORTED`:

* ``"cosine"`` is the cosine similarity cos(a, b) = a·b / (‖a‖ ‖b‖). Losses and
  samplers work on the distance 1 − cos (margins and "larger = farther" keep
  their meaning); retrieval metrics rank by cos; verification and plots show cos;
  :mod:`tfdml.search` reports 1 − cos (in [0, 2], clipped at 0) so that one
  threshold rule (``distance <= threshold``) serves every index distance. Index
  files store the name ``"cosine"`` for that measure.
* ``"euclidean"`` is ‖a − b‖ and ``"squared_euclidean"`` is ‖a − b‖², reported
  as they are by every part.
"""

#: Every distance name a loss, a sampler or a metric accepts.
DISTANCES = ("euclidean", "squared_euclidean", "cosine")

#: The names among :data:`DISTANCES` whose values are similarities.
SIMILARITIES = ("cosine",)

#: What each name measures.
MEASURES = {
    "euclidean": "the euclidean distance ||a - b||",
    "squared_euclidean": "the squared euclidean distance ||a - b||^2",
    "cosine": "the cosine similarity a.b / (||a|| ||b||)",
}

#: The value each part reports (or works on) for a name, as a formula of the measure m.
REPORTED = {
    "losses and samplers": {"euclidean": "m", "squared_euclidean": "m", "cosine": "1 - m"},
    "retrieval metrics, verification, plots": {"euclidean": "m", "squared_euclidean": "m", "cosine": "m"},
    "search (tfdml.search)": {"euclidean": "m", "cosine": "max(1 - m, 0)"},
}


def is_similarity(name):
    """True when larger values of the named distance mean closer (cosine)."""
    return name in SIMILARITIES


def check(distance, choices=DISTANCES, what="distance", hint=""):
    """``distance`` when it is a name among ``choices`` (a subset of :data:`DISTANCES`),
    else a one-line ``ValueError``: ``Unknown <what> <name> (did you mean ...); choose
    one of ...`` followed by ``hint``. A non-string (a function) is refused too: a
    part that stores its distance must be able to write its name."""
    if isinstance(distance, str) and distance in choices:
        return distance
    from tfdml.registry import did_you_mean

    close = did_you_mean(distance, choices) if isinstance(distance, str) else ""
    raise ValueError(f"Unknown {what} {distance!r}{close}; choose one of {', '.join(choices)}{hint}.")
