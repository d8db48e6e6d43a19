"""The ``memory`` part of compare_peers.py: a cross-batch memory's cost in tfdml and in PML.

    python benchmarks/compare_peers.py --parts memory                      # K = 1024, 8192, 32768; B = 256
    python benchmarks/compare_peers.py --parts memory --memory-sizes 1024 --memory-cases contrastive

One training step of a loss with a **full** cross-batch memory (Wang et al.
2020, XBM): forward + backward of the loss on a B × 128 batch of L2-normalised
embeddings (m = 4 per class) mined against the batch and the memory, and the
write of the batch into the memory, as training does. tfdml: the loss with
``memory={"size": K}`` (:mod:`tfdml.memory`), as ``tf.function`` with and
without ``jit_compile`` (``bench_losses.step_fn``; the write is part of the
loss's call, :meth:`tfdml.losses.base.MetricLoss._compute_with_memory`); PML:
``CrossBatchMemory(loss, 128, memory_size, miner)`` eagerly. The cases
(``MEMORY_CASES``):

* ``contrastive``: the loss of configs/xbm_contrastive_memory.yaml (ℓ2
  contrastive on cosine distances: positives 1 − S, negatives [S − (1 − α)]_+,
  every pair); PML's ``ContrastiveLoss(pos_margin=1, neg_margin=1 − α,
  distance=CosineSimilarity())`` with a ``SumReducer``. tfdml takes the mean
  over the pairs, PML (with this reducer) their sum: the row compares tfdml's
  value times its number of pairs, B(B − 1) + B·K with a full memory of other
  examples (its "PML form").
* ``multi-similarity + miner``: the losses part's case (its constants,
  ``compare_peers.MULTI_SIMILARITY``), the same loss on both sides.

Pairing and enqueue order: tfdml mines the batch's anchors against the batch
and its K memory rows (none of the batch's own examples: example ids) and then
writes the batch; PML writes the batch first and mines the anchors against its
memory alone, which then holds the batch, with each anchor's own row removed
(``remove_self_comparisons``). So PML's memory of K + B rows gives each anchor
the candidates tfdml's K rows and the batch give (B − 1 + K), and that is the
PML size each row uses: the same pairs, the same loss value on the same
batch and memory contents.

Filling: each side's loss is called on ⌈K / B⌉ batches of other examples (other
embeddings, labels of the same classes, ids not in the batch) until K rows are
filled (tfdml: its graph step; PML: its forward), the same rows in the same
order on both sides; the first step on the timed batch then gives each side's
loss value on the same batch and memory. The timed steps go on writing the
batch into the memory, as training does. Memory use: the bytes of the memory's
buffers from their shapes and dtypes (tfdml: embeddings, labels, example ids,
class sizes and three counters; PML: embeddings and labels), and each worker's
peak resident set growth (``ru_maxrss``) over the row: 0 where the row needed
no more than the worker's earlier peak (sizes run in ascending order).
"""

import os
import resource

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MEMORY_SIZES = (1024, 8192, 32768)
MEMORY_CASES = ("contrastive", "multi-similarity + miner")
#: The config whose loss the contrastive case runs.
XBM_CONFIG = os.path.join(ROOT, "configs", "xbm_contrastive_memory.yaml")
#: How each case's tfdml value is compared with PML's (the "same loss?" column).
MEMORY_PML_FORM = {
    "contrastive": "tfdml's mean over the pairs times their number B(B − 1) + B·K; PML's SumReducer sums them",
}


def xbm_contrastive_options():
    """``loss.options`` of configs/xbm_contrastive_memory.yaml (margin, squared, distance)."""
    import yaml

    with open(XBM_CONFIG, encoding="utf-8") as f:
        return dict(yaml.safe_load(f)["loss"]["options"])


def pml_memory_size(size, batch):
    """PML's ``memory_size`` for tfdml's memory of ``size`` rows at batch ``batch``: PML writes the
    batch before mining, so its memory holds the batch as well (see the module docstring)."""
    return size + batch


def past_batches(size, batch, per_class, dim):
    """The rows that fill a memory of ``size``: (y, e) batches of ``bench_losses.batch`` (seeds 1, 2,
    …; labels of the timed batch's classes), example ids after the timed batch's, the last one cut so
    that the rows number ``size``."""
    import bench_losses
    import tensorflow as tf

    out, start, seed = [], 0, 1
    while start < size:
        y, e = bench_losses.batch(batch // per_class, per_class, dim, seed=seed)
        take = min(batch, size - start)
        y = {k: v[:take] for k, v in y.items()}
        y["example_id"] = tf.range(batch + start, batch + start + take, dtype=tf.int32)
        out.append((y, e[:take]))
        start, seed = start + take, seed + 1
    return out


def peak_rss_bytes():
    """This process's peak resident set so far (``ru_maxrss``, KiB on Linux), in bytes."""
    return 1024 * resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class TfdmlMemory:
    """The memory part's requests to the tfdml worker (mixed into ``compare_peers.TfdmlSide``)."""

    def memory_loss(self, case, num_classes, dim, size):
        """tfdml's loss of ``case`` with a memory of ``size`` rows (no warm-up)."""
        from tfdml import losses

        memory = {"size": size, "warmup_steps": 0, "embedding_dim": dim}
        if case == "contrastive":
            return losses.ContrastiveLoss(**xbm_contrastive_options(), memory=memory)
        if case in MEMORY_CASES:
            plain = self.loss(case, num_classes, dim)  # the losses part's loss, with its constants
            return type(plain).from_config({**plain.get_config(), "memory": memory})
        raise ValueError(f"unknown memory case {case!r}; choose from {MEMORY_CASES}")

    def memory(self, case, size, batch, per_class, dim, path):
        """Build the graph and XLA steps of ``case`` with a memory of ``size``, fill it, save the
        batch and the memory's rows for PML; answer the first step's loss value (and its PML form),
        the bytes of the memory's buffers and the rows it holds."""
        import bench_losses
        import numpy as np

        classes = batch // per_class
        y, e = bench_losses.batch(classes, per_class, dim)
        loss = self.memory_loss(case, classes, dim, size)
        self.calls = {}
        steps = {mode: bench_losses.step_fn(loss, jit) for mode, jit in (("graph", False), ("xla", True))}
        past = past_batches(size, batch, per_class, dim)
        for py, pe in past:
            steps["graph"](py, pe)
        filled = int(loss.memory.filled.numpy())
        np.savez(path, embeddings=e.numpy(), labels=y["label"].numpy(),
                 memory_embeddings=np.concatenate([pe.numpy() for _, pe in past]),
                 memory_labels=np.concatenate([py["label"].numpy() for py, _ in past]))
        for mode, step in steps.items():
            self.keep(mode, step, y, e)
        value = float(self.calls["graph"]()[0])  # the first step on the timed batch: the check
        pairs = batch * (batch - 1) + batch * filled
        return {"names": list(self.calls), "value": value,
                "pml_form": value * pairs if case in MEMORY_PML_FORM else None,
                "bytes": sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in loss.memory.weights),
                "rows": filled}

    def peak_rss(self):
        """The worker's peak resident set, its libraries imported (a row's growth is then the row's own)."""
        import bench_losses  # noqa: F401
        from tfdml import losses  # noqa: F401

        return {"bytes": peak_rss_bytes()}


class TorchMemory:
    """The memory part's requests to the PyTorch worker (mixed into ``compare_peers.TorchSide``)."""

    def memory_loss(self, case, num_classes, dim, memory_size):
        """PML's ``CrossBatchMemory`` of ``case`` with ``memory_size`` rows."""
        from pytorch_metric_learning import distances, losses, reducers

        if case == "contrastive":
            options = xbm_contrastive_options()
            if options.get("distance") != "cosine" or options.get("squared", True):
                raise ValueError(f"{XBM_CONFIG}: the PML counterpart is written for the ℓ2 contrastive loss on "
                                 f"cosine distances, got {options}")
            loss = losses.ContrastiveLoss(pos_margin=1.0, neg_margin=1.0 - options["margin"],
                                          distance=distances.CosineSimilarity(), reducer=reducers.SumReducer())
            miner = None
        elif case in MEMORY_CASES:
            loss, miner = self.loss(case, num_classes, dim)  # the losses part's PML loss and miner
        else:
            raise ValueError(f"unknown memory case {case!r}; choose from {MEMORY_CASES}")
        return losses.CrossBatchMemory(loss, dim, memory_size=memory_size, miner=miner)

    def memory(self, case, size, batch, per_class, path):
        """PML's step of ``case`` with a memory of ``pml_memory_size(size, batch)`` rows, filled with the
        rows tfdml saved (its forward on each of tfdml's fill batches); answers the first step's loss
        value and the bytes of the memory's buffers."""
        import numpy as np

        torch = self.torch
        data = np.load(path)
        emb = torch.from_numpy(data["embeddings"]).requires_grad_()
        labels = torch.from_numpy(data["labels"].astype(np.int64))
        rows = torch.from_numpy(data["memory_embeddings"])
        row_labels = torch.from_numpy(data["memory_labels"].astype(np.int64))
        xbm = self.memory_loss(case, batch // per_class, emb.shape[1], pml_memory_size(size, batch))
        with torch.no_grad():
            for start in range(0, len(rows), batch):
                xbm(rows[start:start + batch], row_labels[start:start + batch])
        params = list(xbm.parameters())

        def call():
            emb.grad = None
            for p in params:
                p.grad = None
            value = xbm(emb, labels)
            value.backward()
            return value.item()

        self.call_ = call
        value = call()
        buffers = (xbm.embedding_memory, xbm.label_memory)
        return {"value": value, "bytes": sum(b.numel() * b.element_size() for b in buffers)}

    def peak_rss(self):
        """The worker's peak resident set, its libraries imported (a row's growth is then the row's own)."""
        import pytorch_metric_learning.losses  # noqa: F401

        return {"bytes": peak_rss_bytes()}


# --- the part ----------------------------------------------------------------------------------

def mib(count):
    return "–" if count is None else f"{count / 2**20:.1f}"


def memory_header(pml_columns):
    """The memory table's columns."""
    return (["loss", "K", "B", "tfdml graph", "tfdml XLA"] + pml_columns
            + ["graph / PML", "XLA / PML", "tfdml memory MiB", "PML memory MiB", "tfdml peak RSS +MiB",
               "PML peak RSS +MiB", "tfdml loss", "PML loss", "same loss?"])


def memory_settings_lines(cp, cases):
    """One line per case: the hyper-parameters both sides are built with."""
    lines = []
    for case in cases:
        if case == "contrastive":
            o = xbm_contrastive_options()
            lines.append(f"- contrastive: configs/xbm_contrastive_memory.yaml's loss (margin α = {o['margin']}, "
                         f"squared {o['squared']}, {o['distance']}, every pair); PML ContrastiveLoss(pos_margin=1, "
                         f"neg_margin={1 - o['margin']:g}, CosineSimilarity, SumReducer).")
        else:
            lines += cp.settings_lines([case])
    return lines


def part_memory(cp, tfdml, peer, sizes, cases, batch, per_class, dim, runs, warmup, threads, scratch):
    """The memory part. ``cp``: what compare_peers shares with it (``interleaved``, ``timed``,
    ``ratio``, ``cell``, ``thread_label``, ``settings_lines``, ``same_loss_cell``, ``VALUE_RTOL``)."""
    print(f"\n## Cross-batch memory: a training step with a full memory (B = {batch} × {dim}, m = {per_class})\n")
    print(f"Forward + backward of the loss against the batch and a full memory of K rows, and the write of the "
          f"batch into it. Median of {runs} interleaved rounds after {warmup} warm-up calls, ms. Ratios: tfdml "
          f"time / PML time (below 1: tfdml faster){', against the faster PML column' if peer and len(threads) > 1 else ''}. "
          f"PML's CrossBatchMemory writes the batch before mining and removes each anchor's own row, so it holds "
          f"K + B rows for the candidates tfdml's K rows and the batch give (B − 1 + K per anchor). Memory MiB: the "
          f"memory's buffers (shapes × dtypes); peak RSS +MiB: the worker's peak resident set growth over the row "
          f"(0: within its earlier peak). \"same loss?\": the first step's values on the same batch and memory "
          f"(relative {cp.VALUE_RTOL:g}). Settings:\n")
    print("\n".join(memory_settings_lines(cp, cases)) + "\n")
    pml_columns = [f"PML, {cp.thread_label(t)}" for t in threads] if peer else ["PML"]
    header = memory_header(pml_columns)
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 3) + "---:|---|")
    path = os.path.join(scratch, "memory.npz")
    for size in sorted(sizes):
        for case in cases:
            rss = {"tfdml": tfdml.ask("peak_rss")["bytes"]}
            ours = tfdml.ask("memory", case=case, size=size, batch=batch, per_class=per_class, dim=dim, path=path)
            contestants = {name: cp.timed(tfdml, name=name) for name in ours["names"]}
            theirs = None
            if peer:
                rss["torch"] = peer.ask("peak_rss")["bytes"]
                theirs = peer.ask("memory", case=case, size=size, batch=batch, per_class=per_class, path=path)
                for t, column in zip(threads, pml_columns):
                    contestants[column] = cp.timed(peer, threads=t)
            median = cp.interleaved(contestants, runs, warmup)
            grown = {side: (worker.ask("peak_rss")["bytes"] - rss[side]) if side in rss else None
                     for side, worker in (("tfdml", tfdml), ("torch", peer))}
            print("| " + " | ".join(memory_row(case, size, batch, median, pml_columns, ours, theirs, grown,
                                               cp)) + " |", flush=True)
    notes = [f"- {case}: {why}." for case, why in MEMORY_PML_FORM.items() if case in cases]
    if peer and notes:
        print("\nCompared in PML's form (\"same loss?\"):\n\n" + "\n".join(notes))


def memory_row(case, size, batch, median, pml_columns, ours, theirs, grown, cp):
    """The cells of one memory row (``median``: seconds per contestant; ``grown``: peak RSS growth
    in bytes per side, None for a side not run)."""
    pml = min((median[c] for c in pml_columns if c in median), default=None)
    value = None if theirs is None else theirs["value"]
    return ([case, f"{size:,}", str(batch), cp.cell(median["graph"]), cp.cell(median["xla"])]
            + [cp.cell(median.get(c)) for c in pml_columns]
            + [cp.ratio(median["graph"], pml), cp.ratio(median["xla"], pml),
               mib(ours["bytes"]), mib(None if theirs is None else theirs["bytes"]),
               mib(grown["tfdml"]), mib(grown["torch"]),
               f"{ours['value']:.6g}", "–" if value is None else f"{value:.6g}",
               cp.same_loss_cell(case, ours, value, pml_form=MEMORY_PML_FORM, no_pml=(), different=())])

