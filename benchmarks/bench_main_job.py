"""Main-job variants: held-out Recall@1, MAP@R and NMI of a config over seeds.

    python benchmarks/bench_main_job.py                                  # configs/default.yaml, seeds 0-2
    python benchmarks/bench_main_job.py --set optimizer.head_lr_multiplier=1.0 --seeds 0 1 2 3 4
    python benchmarks/bench_main_job.py --probe-backbone --set model.embedding_dim=64

Each seed runs ``tfdml_app.fit.run`` (the code behind ``train.py``) into a
temporary directory, then embeds the test split and reports Recall@1, MAP@R
and NMI with k-means ``n_init=10``. The ``tfdml.metrics`` code is the same as
train.py's, but k-means gets the best of 10 starts.

* ``--probe-backbone`` also scores the L2-normalised backbone output (the
  features before the embedding head).
* ``--raw`` prints the same figures for L2-normalised raw pixels.

The last lines give the mean and the minimum over seeds. The results table is
in benchmarks/RESULTS.md, "Main job".
"""

import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import machine  # noqa: E402
from tfdml_app import config as config_lib  # noqa: E402
from tfdml_app import data, fit  # noqa: E402
from tfdml import metrics as metrics_lib  # noqa: E402
from tfdml.metrics.clustering import clustering_metrics  # noqa: E402


class _KeepModel(keras.callbacks.Callback):
    """Hands the trained model back out of ``tfdml_app.fit.run``."""

    model_after_training = None

    def on_train_end(self, logs=None):
        _KeepModel.model_after_training = self.model


def scores(embeddings, labels):
    values = metrics_lib.evaluate_embeddings(embeddings, labels, metrics=["recall", "map@r"], ks=[1])
    nmi = clustering_metrics(embeddings, labels, metrics=("nmi",), n_init=10)["nmi"]
    return {"r1": float(values["recall@1"]), "map@r": float(values["map@r"]), "nmi": float(nmi)}


def l2_normalise(x):
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def run_seed(config_path, overrides, seed, probe_backbone):
    with tempfile.TemporaryDirectory() as out:
        cfg = config_lib.load(config_path, list(overrides) + [f"seed={seed}", f"output_dir={out}",
                                                              "evaluation.metrics=[recall]"])
        started = time.time()
        fit.run(cfg, fresh=True, verbose=0, callbacks=[_KeepModel()])
        model = _KeepModel.model_after_training
        split = data.build_source(cfg).split(cfg["data"]["test_split"])
        batches = data.eval_dataset(cfg, split)
        row = {"seed": seed, **scores(model.predict(batches, verbose=0), split.labels)}
        if probe_backbone:
            backbone = model.encoder.layers[1]
            features = keras.Model(model.encoder.input, backbone(model.encoder.input)).predict(batches, verbose=0)
            row.update({f"backbone_{k}": v for k, v in scores(l2_normalise(features), split.labels).items()})
        row["seconds"] = round(time.time() - started, 1)
        return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "default.yaml"))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--probe-backbone", action="store_true")
    parser.add_argument("--raw", action="store_true", help="also score raw pixels")
    args = parser.parse_args(argv)
    print(machine.describe(), flush=True)
    print("config:", args.config, "overrides:", args.overrides or "none", flush=True)
    if args.raw:
        cfg = config_lib.load(args.config, args.overrides)
        split = data.build_source(cfg).split(cfg["data"]["test_split"])
        print("raw pixels:", json.dumps({k: round(v, 4) for k, v in scores(l2_normalise(split.images),
                                                                             split.labels).items()}))
    rows = []
    for seed in args.seeds:
        rows.append(run_seed(args.config, args.overrides, seed, args.probe_backbone))
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in rows[-1].items()}),
              flush=True)
    keys = [k for k in rows[0] if k not in ("seed", "seconds")]
    for name, reduce in (("mean", np.mean), ("min", np.min)):
        print(f"{name} over seeds {args.seeds}:", json.dumps({k: round(float(reduce([r[k] for r in rows])), 3)
                                                              for k in keys}))


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "bench_main_job"))
