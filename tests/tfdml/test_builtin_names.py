"""tfdml.builtin_names lists, without TensorFlow, the names the registries hold when
nothing but tfdml is imported: the config is checked against it before TensorFlow
is imported, so each list must equal its registry (names and order)."""

import os
import subprocess
import sys

from tfdml import builtin_names

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_LIVE = """
import inspect, json
from pipelines import designs, sources
from tfdml import backbones, losses, metric_names, metrics, models, samplers
from tfdml.losses import daml_forms
from tfdml.metrics import knn
from tfdml_app import loss_config, sampler_fit
print(json.dumps({
    "LOSSES": list(losses.LOSSES),
    "SAMPLERS": list(samplers.SAMPLERS),
    "BACKBONES": list(backbones.BACKBONES),
    "DESIGNS": list(designs.DESIGNS),
    "GROUPED_DESIGNS": [n for n, c in designs.DESIGNS.items() if c.grouped_by_class],
    "DESIGN_OPTIONS": {n: c.config_options for n, c in designs.DESIGNS.items()},
    "DESIGN_OPTION_NAMES": {n: list(c.option_names()) for n, c in designs.DESIGNS.items()},
    "SOURCES": list(sources.SOURCES),
    "VALIDATION_MODES": list(sources.VALIDATION_MODES),
    "RETRIEVAL_DISTANCES": list(knn.RETRIEVAL_DISTANCES),
    "JIT_COMPILE_CHOICES": list(models.JIT_COMPILE_CHOICES),
    "LOSS_ONLY": models.LOSS_ONLY,
    "DTYPE_POLICY_CHOICES": list(models.DTYPE_POLICY_CHOICES),
    "DAML_FORMS": list(daml_forms.FORMS),
    "METRICS": list(metrics.METRICS),
    "LOSS_OPTIONS": {n: loss_config._option_names(c) for n, c in losses.LOSSES.items()},
    "LOSS_SAMPLING": sampler_fit.library_facts().losses,
    "SAMPLER_FACTS": sampler_fit.library_facts().samplers,
    "LEARNED_SAMPLER_OPTIONS": list(sampler_fit.dsn_options()),
    "WEIGHTED_SUM_LOSS": inspect.signature(losses.WeightedSumLoss).parameters["name"].default,
}))
"""


def test_the_builtin_names_are_the_registries_of_a_fresh_interpreter():
    """In a fresh interpreter, so that what the test session registers does not count."""
    import json

    proc = subprocess.run([sys.executable, "-c", _LIVE], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    live = json.loads(proc.stdout.splitlines()[-1])
    from tfdml import metric_names

    from tfdml import distance_names

    own = {"METRICS": metric_names.METRICS, "RETRIEVAL_DISTANCES": distance_names.DISTANCES}
    static = {name: own[name] if name in own else getattr(builtin_names, name) for name in live}
    tables = ("LOSS_OPTIONS", "LOSS_SAMPLING", "SAMPLER_FACTS", "DESIGN_OPTIONS", "DESIGN_OPTION_NAMES")
    static = {k: v if isinstance(v, str) else list(v) for k, v in static.items() if k not in tables}
    static["LOSS_OPTIONS"] = {n: None if o is None else list(o) for n, o in builtin_names.LOSS_OPTIONS.items()}
    for table in tables[1:]:  # as JSON reads them: tuples are lists
        static[table] = json.loads(json.dumps(getattr(builtin_names, table)))
    assert static == live
    # In the registries' order: the valid samplers an error lists come in this order.
    assert list(builtin_names.LOSS_SAMPLING) == list(builtin_names.LOSSES)
    assert list(builtin_names.SAMPLER_FACTS) == list(builtin_names.SAMPLERS)


def test_builtin_names_imports_nothing_heavy():
    proc = subprocess.run([sys.executable, "-c", "import sys, tfdml.builtin_names; "
                           "print(sorted(m for m in ('tensorflow', 'keras', 'numpy', 'yaml', 'pipelines') "
                           "if m in sys.modules))"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "[]", proc.stderr
