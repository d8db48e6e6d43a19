"""The metric names tfdml knows and the one table of default metrics and ks.

Without TensorFlow, so that the config reader (:mod:`tfdml_app.config`) reads
them before TensorFlow is imported. Every default derives from here: the
library (:func:`tfdml.metrics.evaluate_embeddings`,
:class:`tfdml.callbacks.RetrievalEvaluation`), a config's ``evaluation``
section and ``evaluate.py``. What each name computes is listed in
:mod:`tfdml.metrics`.
"""

#: Every metric name :func:`tfdml.metrics.parse_metrics` accepts (besides recall@k / precision@k).
METRICS = ("recall", "precision", "map@r", "r_precision", "map", "mrr", "nmi", "ami", "f1",
           "verification")

#: The metrics computed when none are named: Recall@k (Wu §5), MAP@R and R-precision
#: (Musgrave et al. 2020) and NMI (Wu §5).
DEFAULT_METRICS = ("recall", "map@r", "r_precision", "nmi")

#: The ks of recall@k / precision@k when none are named: the 1, 2, 4, 8 that the
#: papers report (Wu §5; Song et al. 2016).
DEFAULT_KS = (1, 2, 4, 8)
