"""User code for ``train.py --import tests.tfdml_app.extension_module``: one new sampler,
one new batch design, one new data source and one new metric, each added through its
registry in this one file. ``USED`` collects the parts a run called."""

import numpy as np
import tfdml
from pipelines import designs, sources

USED = set()


@tfdml.samplers.register("extension_sampler")
class ExtensionSampler(tfdml.samplers.DistanceWeightedSampler):
    """Distance-weighted sampling that notes its use (when the step is traced)."""

    def sample(self, dist, labels, candidates, seed=None, embedding_dim=None):
        USED.add("sampler")
        return super().sample(dist, labels, candidates, seed=seed, embedding_dim=embedding_dim)


@designs.register("extension_design")
class ExtensionDesign(designs.MPerClassDesign):
    """m-per-class batches that note their use, with an option of their own."""

    def __init__(self, m, classes_per_batch=None, batch_size=None, note="none"):
        super().__init__(m, classes_per_batch=classes_per_batch, batch_size=batch_size)
        self.note = note

    def validate(self, split_or_labels):
        USED.add(f"design {self.note}")
        return super().validate(split_or_labels)


@sources.register("extension_source")
def extension_source(classes=10, per_class=8, dim=4, seed=0):
    """Gaussian blobs in ``dim`` dimensions, one per class, as an in-memory source."""
    USED.add("source")
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim)) * 3.0
    labels = np.repeat(np.arange(classes), per_class)
    features = (centres[labels] + rng.normal(size=(len(labels), dim))).astype(np.float32)
    return sources.arrays(features, labels)


@tfdml.metrics.register("extension_metric")
def extension_metric(embeddings, labels, **options):
    """The mean norm of the embeddings (1 for unit-norm ones), noting its use."""
    USED.add("metric")
    return float(np.mean(np.linalg.norm(embeddings, axis=1)))
