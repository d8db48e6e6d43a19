"""tfdml_app: the application that wires the data side (:mod:`pipelines`) to the
model side (:mod:`tfdml`); neither package imports the other, and this one
imports both.

* :mod:`tfdml_app.config` — the one reader and validator of configs
  (:mod:`tfdml_app.schema`: the keys; :mod:`tfdml_app.config_checks`: the checks of
  their values; :mod:`tfdml_app.sampler_fit`: which sampler fits which loss;
  :mod:`tfdml_app.loss_config`: the loss and sampler, as the library builds them;
  :mod:`tfdml_app.parts`: what the application reads of the library's classes);
* :mod:`tfdml_app.data`, :mod:`tfdml_app.build` — the config's sections turned
  into data and model objects;
* :mod:`tfdml_app.fit` — a whole run: build, train (resume), evaluate, export
  (:mod:`tfdml_app.fit_loops`, :mod:`tfdml_app.export`, :mod:`tfdml_app.summary`;
  :mod:`tfdml_app.advice`: the config changes it suggests, tried on its data first);
* :mod:`tfdml_app.evaluation`, :mod:`tfdml_app.embedding` — evaluating an embedding model;
* :mod:`tfdml_app.train_cli`, :mod:`tfdml_app.evaluate_cli`, :mod:`tfdml_app.search_cli` —
  the command lines (``train.py``, ``evaluate.py``, ``search.py``; installed as
  ``tfdml-train``, ``tfdml-evaluate``, ``tfdml-search``; :mod:`tfdml_app.commands`:
  the name each was invoked as).

Importing this package imports nothing else: :mod:`tfdml_app.config` checks a
config's keys, types, ranges and built-in names before TensorFlow is imported.
"""
