"""Watch a cross-batch memory while one XBM arm trains (an investigation of xbm_memory).

    python study/probe_memory.py --arm xbm-contrastive-mem1024 --seed 0
    python study/probe_memory.py --arm xbm-contrastive-mem1024 --warmup-fraction 0.75
    python study/probe_memory.py --arm xbm-contrastive-mem0 --set optimizer.learning_rate=1e-4

The XBM arms of ``reproduce.py`` fall when their memory switches on. This script
trains one of them (its config and view, through the user's ``train.py`` path,
:func:`tfdml_app.fit.run`) with a callback that, every ``--every`` steps, measures:

**How fast the embedding drifts.** A fixed sample of 1,024 training images is
embedded at each probe as a training step embeds a batch (BatchNormalization on
batch statistics, chunks of the design's batch size; the memory stores embeddings
computed that way) and as evaluation does (moving statistics); the median cosine
between an image's embedding now and at the previous probe is the drift over
``--every`` steps (16 by default: the age of the oldest row of a memory of 1,024 at
batch 64). Wang et al. 2020 (§3.1, "slow drift") use a memory once this is near 1,
when a past embedding stands in for the current one. Measured for arms without a
memory too.

**Does the memory hold what it should?** (arms with a memory, once it holds rows)
Every filled row's label must equal the training split's label of the row's example
id, and its stored embedding is compared with the current encoder's embedding of
the same image in the same batch (a memory of whole batches keeps each batch in
consecutive rows).

**Which pairs drive the loss?** The last batch written (its B rows) are the
anchors, with their current embeddings, as in the step that wrote them: candidates
are the batch itself and the memory's other rows. For Wang's contrastive loss
(configs/xbm_contrastive_memory.yaml: tfdml's ``contrastive`` on cosine distance,
margin α: positives 1 − S, negatives [S − (1 − α)]_+), per anchor: positives and active
negatives (nonzero terms) from the batch and from the memory, each group's sum of
terms, and the norms of the pull of the positives and the push of the active
negatives on the anchor (the sums of the candidates' unit vectors, projected on the
anchor's tangent plane: the gradient of those terms with respect to a unit
embedding). Other losses get the fault checks only.

Results: ``<out>/probes/memory-<arm>-seed<s>-warmup<w>.json`` (one record per
probe point, plus the run's evaluations; written atomically) and a table on stdout.
The run folder beside it (``probes/memory-.../``) is not committed.
"""

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]

import reproduce  # noqa: E402  (study/reproduce.py)
from tfdml import files  # noqa: E402


def contrastive_margin(cfg):
    """α of an arm whose loss is the contrastive loss on cosine distance (ℓ2, not squared),
    else None (the composition is not computed)."""
    loss = cfg["loss"]
    options = loss.get("options", {})
    if loss["name"] != "contrastive" or options.get("distance") != "cosine" or options.get("squared", True):
        return None
    return float(options["margin"])


def tangent_norms(anchors, candidates, mask):
    """[B] norms of Σ_j mask_aj · c_j projected on the tangent plane at each unit anchor a:
    the gradient of Σ_j mask_aj · S_aj with respect to a, on the sphere."""
    total = mask.astype(np.float64) @ candidates.astype(np.float64)  # [B, d]
    radial = np.sum(total * anchors, axis=1, keepdims=True) * anchors
    return np.linalg.norm(total - radial, axis=1)


def composition(anchors, anchor_labels, anchor_ids, memory, memory_labels, memory_ids, margin):
    """Per-anchor medians of the contrastive loss's pairs against the batch and the memory
    (module docstring). ``anchors`` [B, d] current, unit; ``memory`` [K', d] stored rows."""
    threshold = 1.0 - margin
    rows = {}
    for source, cands, labels, ids in (("batch", anchors, anchor_labels, anchor_ids),
                                       ("memory", memory, memory_labels, memory_ids)):
        similarity = anchors @ cands.T
        other = anchor_ids[:, None] != ids[None, :]
        positive = (anchor_labels[:, None] == labels[None, :]) & other
        negative = (anchor_labels[:, None] != labels[None, :]) & (similarity > threshold)
        rows[source] = {
            "positives": float(np.median(positive.sum(1))),
            "active_negatives": float(np.median(negative.sum(1))),
            "positive_terms": float(np.sum(np.where(positive, 1.0 - similarity, 0.0))),
            "negative_terms": float(np.sum(np.where(negative, similarity - threshold, 0.0))),
            "pull": float(np.median(tangent_norms(anchors, cands, positive))),
            "push": float(np.median(tangent_norms(anchors, cands, negative))),
            "mean_negative_similarity": float(np.mean(similarity[~positive & other])),
        }
    return rows


def make_probe_callback(cfg, every, records, sample_size=1024):
    """A Keras callback appending a record to ``records`` every ``every`` steps: the drift
    of a fixed sample of ``sample_size`` training images (all, in a smaller split) over those steps, and once the
    memory holds rows (an arm with one) the memory's checks (:func:`probe`; a group
    design's batch: m · n rows)."""
    import keras
    from tfdml_app import data as data_lib

    train_split, _ = data_lib.split_validation(
        cfg, data_lib.build_source(cfg).split(cfg["data"]["train_split"]))
    margin = contrastive_margin(cfg)
    batch_size = cfg["design"]["options"]["m"] * cfg["design"]["options"]["n"]
    rng = np.random.default_rng(0)
    size = min(sample_size, train_split.num_examples)
    sample = train_split.load(rng.choice(train_split.num_examples, size, replace=False))  # mixed classes

    class MemoryProbe(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.step = 0
            self.previous = None

        def on_train_batch_end(self, batch, logs=None):
            self.step += 1
            if self.step % every:
                return
            now = (embed_as_trained(self.model.encoder, sample, batch_size),
                   unit_rows(self.model.encoder.predict(sample, batch_size=1024, verbose=0)))
            record = {"step": self.step, "loss": float((logs or {}).get("loss", np.nan))}
            if self.previous is not None:
                trained, inference = (np.median(np.sum(a * b, axis=1)) for a, b in zip(now, self.previous))
                record.update(sample_drift_cosine_median=float(trained),
                              sample_drift_inference_cosine_median=float(inference))
            self.previous = now
            memory = getattr(self.model._metric_loss, "memory", None)
            filled = 0 if memory is None else int(memory.filled.numpy())
            if filled:
                record.update(probe(self.model.encoder, memory, filled, train_split, margin, batch_size))
            records.append(record)
            print(f"  step {self.step}: {_line(record)}", flush=True)

    return MemoryProbe()


def unit_rows(values):
    values = np.asarray(values, np.float64)
    return values / np.maximum(np.linalg.norm(values, axis=1, keepdims=True), 1e-12)


def embed_as_trained(encoder, images, batch_size):
    """Unit embeddings of ``images`` as a training step computes them: BatchNormalization
    on each chunk of ``batch_size`` rows with the chunk's own statistics (``training=True``);
    the layers' moving statistics are put back afterwards, so the run goes on unchanged."""
    saved = [v.numpy() for v in encoder.non_trainable_variables]
    try:
        parts = [np.asarray(encoder(images[i:i + batch_size], training=True))
                 for i in range(0, len(images), batch_size)]
    finally:
        for variable, value in zip(encoder.non_trainable_variables, saved):
            variable.assign(value)
    return unit_rows(np.concatenate(parts))


def probe(encoder, memory, filled, split, margin, batch_size):
    """The memory's checks (module docstring) on its first ``filled`` rows. The current
    embeddings are computed as trained (:func:`embed_as_trained`) on the rows' own batches:
    the memory's rows from the oldest, ``batch_size`` at a time (a memory of whole batches
    holds each batch in consecutive rows). The last batch written is the anchors of the
    pair composition."""
    ids = memory.example_ids.numpy()[:filled]
    labels = memory.labels.numpy()[:filled]
    position = int(memory.position.numpy())
    oldest_first = (position + np.arange(filled)) % memory.size if filled == memory.size else np.arange(filled)
    current = np.empty((filled, memory.embeddings.shape[1]))
    current[oldest_first] = embed_as_trained(encoder, split.load(ids[oldest_first]), batch_size)
    stored = unit_rows(memory.embeddings.numpy()[:filled])
    drift = np.sum(current * stored, axis=1)
    record = {"filled": filled, "label_mismatches": int(np.sum(labels != split.labels[ids])),
              "drift_cosine_median": float(np.median(drift)), "drift_cosine_min": float(np.min(drift))}
    if margin is not None:
        batch = oldest_first[-batch_size:]
        rest = np.setdiff1d(np.arange(filled), batch)
        record["pairs"] = composition(current[batch], labels[batch], ids[batch], stored[rest],
                                      labels[rest], ids[rest], margin)
    return record


def _line(record):
    text = f"loss {record['loss']:.4f}"
    if "sample_drift_cosine_median" in record:
        text += (f", sample drift cos {record['sample_drift_cosine_median']:.3f} as trained, "
                 f"{record['sample_drift_inference_cosine_median']:.3f} as evaluated")
    if "filled" in record:
        text += (f", rows {record['filled']}, label mismatches {record['label_mismatches']}, stored vs current "
                 f"cos median {record['drift_cosine_median']:.3f} (min {record['drift_cosine_min']:.3f})")
    pairs = record.get("pairs")
    if pairs:
        b, m = pairs["batch"], pairs["memory"]
        text += (f"; per anchor: batch {b['positives']:.0f} pos / {b['active_negatives']:.0f} active neg, "
                 f"memory {m['positives']:.0f} pos / {m['active_negatives']:.0f} active neg; "
                 f"pull {b['pull'] + m['pull']:.2f}, push batch {b['push']:.2f} memory {m['push']:.2f}")
    return text


def table(records, every):
    """Markdown table of the probe records."""
    lines = [f"| step | loss | sample drift cos over {every} steps: as trained / as evaluated | label mismatches | "
             "stored vs current cos (median / min) | batch pos / active neg | memory pos / active neg | pull | "
             "push batch | push memory |", "|---:|---:|---|---:|---|---|---|---:|---:|---:|"]
    for r in records:
        cells = [str(r["step"]), f"{r['loss']:.4f}", f"{r['sample_drift_cosine_median']:.3f} / "
                 f"{r['sample_drift_inference_cosine_median']:.3f}" if "sample_drift_cosine_median" in r else "–"]
        if "filled" in r:
            cells += [str(r["label_mismatches"]), f"{r['drift_cosine_median']:.3f} / {r['drift_cosine_min']:.3f}"]
        else:
            cells += ["–", "–"]
        p = r.get("pairs")
        if p:
            b, m = p["batch"], p["memory"]
            cells += [f"{b['positives']:.0f} / {b['active_negatives']:.0f}",
                      f"{m['positives']:.0f} / {m['active_negatives']:.0f}",
                      f"{b['pull'] + m['pull']:.2f}", f"{b['push']:.2f}", f"{m['push']:.2f}"]
        else:
            cells += ["–"] * 5
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    xbm = sorted(a for a in reproduce.ARMS if a.startswith("xbm-"))
    p.add_argument("--arm", default="xbm-contrastive-mem1024", choices=xbm)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget", choices=sorted(reproduce.BUDGETS), default="standard")
    p.add_argument("--warmup-fraction", type=float, help="when the memory starts, a fraction of the "
                   "run's steps (default: the arm's)")
    p.add_argument("--every", type=int, default=16, help="steps between probes (16: the age of the oldest "
                   "row of a memory of 1,024 at batch 64)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="change the arm's config as train.py's --set does (e.g. optimizer.learning_rate=1e-4); "
                        "the result's name records it")
    reproduce.add_probe_arguments(p)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    budget = reproduce.BUDGETS[args.budget]
    out, data_dir = reproduce.probe_folders(args)
    view = reproduce.view_of(args.arm, data_dir, out, budget)
    fraction = args.warmup_fraction if args.warmup_fraction is not None else reproduce.ARMS[args.arm].get(
        reproduce.WARMUP_KEY, 0.0)
    name = f"memory-{args.arm}-seed{args.seed}-warmup{fraction:g}" + "".join(
        f"-{text.replace('=', '')}" for text in args.set)
    run_dir = os.path.join(out, "probes", name)
    config = reproduce.arm_config(args.arm, args.seed, view, budget, run_dir)
    steps = config["training"]["epochs"] * config["training"]["steps_per_epoch"]
    if "memory" in config["loss"]:
        config["loss"]["memory"]["warmup_steps"] = int(round(fraction * steps))

    from tfdml_app import config as config_lib
    from tfdml_app import fit

    cfg = config_lib.validate(config_lib.apply_overrides(config, args.set))
    records = []
    result = fit.run(cfg, fresh=True, verbose=0, callbacks=[make_probe_callback(cfg, args.every, records)])
    evaluations = {key: [float(v) for v in values] for key, values in result["history"].items()}
    memory = cfg["loss"]["memory"]
    path = os.path.join(out, "probes", f"{name}.json")
    files.write_json(path, {"arm": args.arm, "seed": args.seed, "warmup_fraction": fraction, "set": args.set,
                            "warmup_steps": memory["warmup_steps"] if memory else None,
                            "steps": steps,
                            "records": records, "history": evaluations,
                            "test_metrics": result.get("metrics", {})}, indent=1)
    print(f"\n{args.arm}, seed {args.seed}, memory from step {memory['warmup_steps'] if memory else '–'}; "
          f"wrote {path}\n")
    print(table(records, args.every))
    print("\nevaluations:", {k: [round(v, 3) for v in vals] for k, vals in evaluations.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
