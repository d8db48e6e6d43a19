"""The metric names tfdml knows and the one table of default metrics and ks.

Without TensorFlow, so that the config reader (:mod:`tfdml_app.config`) reads
them before TensorFlow is imported. Every default derives from here: the
library (:func:`tfdml.metrics.evaluate_embeddings`,
:class:`tfdml.callbacks.RetrievalEvaluation`), a config's ``evaluation``
section and ``evaluate.py``. What each name computes is listed in
:mod:`tfdml.metrics`.
"""

import dataclasses
import numbers

from tfdml import registry


@dataclasses.dataclass(frozen=True)
class BuiltinMetric:
    """The entry of a metric tfdml computes itself, together with the others of its
    ``family`` ("retrieval": one ranking; "clustering": one k-means; "verification")."""

    family: str


#: Other names of metrics (lower case) → their names.
ALIASES = {"mapr": "map@r", "map_at_r": "map@r", "rprecision": "r_precision",
           "r-precision": "r_precision", "auc": "verification", "roc_auc": "verification",
           "eer": "verification", "verification_accuracy": "verification",
           "mean_reciprocal_rank": "mrr", "adjusted_mutual_info": "ami"}


def _check_metric(name, fn):
    if name != name.lower():
        raise ValueError(f"A metric name is lower case (names are matched case-blind), got {name!r}.")
    if name in ALIASES:
        raise ValueError(f"{name!r} is an alias of {ALIASES[name]!r}; choose another metric name.")
    if not callable(fn) or isinstance(fn, BuiltinMetric):
        raise ValueError(f"register({name!r}) needs a callable metric(embeddings, labels, **options) "
                         f"returning a number, got {fn!r}.")


#: Every metric name :func:`tfdml.metrics.parse_metrics` accepts (besides recall@k /
#: precision@k and :data:`ALIASES`): a :class:`tfdml.registry.Registry` of the
#: built-in names (:class:`BuiltinMetric` entries) and of the metrics registered
#: with :func:`tfdml.metrics.register` (their functions).
METRICS = registry.Registry("metric", check=_check_metric)
METRICS.update({name: BuiltinMetric(family) for family, names in (
    ("retrieval", ("recall", "precision", "map@r", "r_precision", "map", "mrr")),
    ("clustering", ("nmi", "ami", "f1")),
    ("verification", ("verification",)),
) for name in names})

#: The metrics computed when none are named: Recall@k (Wu §5), MAP@R and R-precision
#: (Musgrave et al. 2020) and NMI (Wu §5).
DEFAULT_METRICS = ("recall", "map@r", "r_precision", "nmi")

#: The ks of recall@k / precision@k when none are named: the 1, 2, 4, 8 that the
#: papers report (Wu §5; Song et al. 2016).
DEFAULT_KS = (1, 2, 4, 8)


def parse_metrics(metrics=DEFAULT_METRICS, ks=DEFAULT_KS):
    """Validate metric names and ks; returns ``(names, ks)`` in canonical form.

    Raises ValueError naming the bad entry and the valid choices.
    """
    if isinstance(metrics, str):
        metrics = [metrics]
    if isinstance(ks, numbers.Integral):
        ks = [ks]
    out_ks = set()
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"ks must be positive integers, got {k!r} in {list(ks)}.")
        out_ks.add(int(k))
    names = []
    for raw in metrics:
        name = str(raw).strip().lower()
        name = ALIASES.get(name, name)
        for prefix in ("recall@", "precision@"):
            if name.startswith(prefix):
                try:
                    k = int(name[len(prefix):])
                except ValueError:
                    k = 0
                if k < 1:
                    raise ValueError(f"Bad metric {raw!r}: expected e.g. {prefix}1.")
                out_ks.add(k)
                name = prefix[:-1]
        if name not in METRICS:
            raise ValueError(
                f"Unknown metric {raw!r}{registry.did_you_mean(name, METRICS)}; choose from "
                f"{', '.join(METRICS)} (or recall@k / precision@k)."
            )
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError(f"No metric requested; choose from {', '.join(METRICS)}.")
    if ("recall" in names or "precision" in names) and not out_ks:
        out_ks = set(DEFAULT_KS)
    return tuple(names), tuple(sorted(out_ks))
