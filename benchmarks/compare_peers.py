"""tfdml next to its peers on this machine: PML, PyTorch, faiss, TF Addons, TF Similarity.

    python benchmarks/compare_peers.py                                # losses, eval, fit: B = 256, 1024; n = 20k; fit B = 128
    python benchmarks/compare_peers.py --parts losses --batch 256 --runs 5
    python benchmarks/compare_peers.py --parts losses --cases histogram "proxy anchor"
    python benchmarks/compare_peers.py --parts eval --large           # n = 20k and 60k
    python benchmarks/compare_peers.py --parts fit --fit-rounds 3 --fit-steps 30
    python benchmarks/compare_peers.py --parts fit --fit-network-only --fit-modes graph graph:mixed_bfloat16
    python benchmarks/compare_peers.py --parts memory --memory-sizes 1024 8192 32768   # peers_memory.py
    python benchmarks/compare_peers.py --threads 2 1                  # PyTorch with 2 and with 1 thread
    python benchmarks/compare_peers.py --make-legacy-venv             # TF Addons + TF Similarity, once
    python benchmarks/compare_peers.py --parts losses --legacy-python PATH/bin/python

The peers are optional: ``pip install -e ".[bench]"`` installs
pytorch-metric-learning (PML), PyTorch and faiss-cpu (install a CPU-only build
of PyTorch first: docs/guide.md, "Benchmarks and reproduction"). A peer that
is not installed is skipped with a message and tfdml's side runs alone. To
keep tfdml's environment unchanged (torch's requirements upgrade packages in
it, e.g. setuptools), give the peers a venv of their own that also sees
tfdml's packages through a ``.pth`` file, and run this script with its
interpreter (both workers then use it)::

    python -m venv PEERS
    python -c "import site; print(site.getsitepackages()[0])" > PEERS/lib/python3.11/site-packages/tfdml-env.pth
    PEERS/bin/pip install torch==2.13.0 pytorch-metric-learning   # torch: a CPU build (see above)
    PEERS/bin/python benchmarks/compare_peers.py --parts losses

(``python`` there is tfdml's interpreter; ``--system-site-packages`` would
expose the base interpreter's packages, not those of tfdml's venv.) Four parts
(the fourth, ``memory``, a cross-batch memory's step in tfdml and in PML, is
described in peers_memory.py):

* ``losses`` — one forward + backward of loss and miner on the same B × 128
  L2-normalised embeddings (m = 4 per class) in each library (``--cases``):
  the triplet cases (margins 0.2, ℓ2 distance: semi-hard triplet, distance
  weighted + margin with β learned per class on both sides, batch-hard
  triplet) and the other losses of tfdml against PML's implementation with
  the same hyper-parameters (the constants below; ``settings_lines`` prints
  them): lifted structured (Song et al. Eq. 4, PML's ``LiftedStructureLoss``)
  and its generalized form (Hermans et al., PML's
  ``GeneralizedLiftedStructureLoss``), multi-similarity with its miner,
  histogram, angular, proxy NCA and proxy anchor (tfdml's proxies copied to
  PML), the classification losses (normalized softmax, CosFace, ArcFace,
  sub-center ArcFace) and SoftTriple (tfdml's class weights copied to PML's
  ``W`` / ``fc``, which PML lays out as [dim, classes]), FastAP, circle,
  SupCon, and on the batch's two views of each instance (rows 2k and 2k + 1,
  ``example_id``) NT-Xent and VICReg; the samplers easy-hard (PML's
  ``BatchEasyHardMiner``, with the triplet loss) and pair-margin (PML's
  ``PairMarginMiner``, with the ℓ2 contrastive loss); binomial deviance and
  Barlow Twins have no PML counterpart and run alone. Each row
  first computes the loss on that batch on both sides and says whether the
  values agree, or why the two are different losses (``DIFFERENT_LOSS``,
  ``PML_FORM``). tfdml as ``tf.function`` with and
  without ``jit_compile`` (``bench_losses.step_fn``), PML eagerly, TF Addons
  and TF Similarity (the *legacy* peers, below) as ``tf.function`` without
  ``jit_compile``. Calls are interleaved (tfdml graph, tfdml XLA, PML, TF
  Addons, TF Similarity, tfdml graph, …); the figure is the median of
  ``--runs`` rounds after ``--warmup`` calls. Before each timed call its side
  makes up to ``SETTLING_CALLS`` untimed ones (until they took
  ``SETTLING_SECONDS``): the previous side's worker threads
  (PyTorch's OpenMP pool, TensorFlow's Eigen pool) still spin for a while after
  its call returns, and a side timed right after another side's call paid for
  that spinning (tfdml graph, timed right after PML, up to twice its time
  alone).
* ``eval`` — Precision@1, MAP@R and R-Precision, leave-one-out, on random
  128-d embeddings (``bench_eval.py``'s data): tfdml.metrics, PML's
  ``AccuracyCalculator`` (k = max_bin_count, faiss search) and faiss +
  NumPy, each in a fresh process (``bench_eval.run_in_child``): a cold call and
  the median of the warm calls after it.
* ``fit`` — ``model.fit`` step time of the network of
  ``bench_fit_step.py`` (modes graph, xla, loss) against the same network in
  PyTorch (Conv2d-BatchNorm2d-ReLU-MaxPool2d × 4, AdaptiveAvgPool2d, Linear
  128, F.normalize) with PML's MarginLoss + DistanceWeightedMiner and Adam,
  in interleaved rounds (a fresh model each), median step time.

TensorFlow and PyTorch never share a process: each side runs in a worker
process of its own (this script with ``--worker``) that imports only its
library, and this process interleaves their calls. In one process, PML ran
many times slower once TensorFlow had been imported and run, and a tfdml call
right after a PML call was slower too. The tfdml
worker saves the batch it times to a file that the PyTorch worker reads, so
both sides see the same numbers.

Ratios are tfdml's time over the peer's (below 1: tfdml is faster), taken in
one run, so that the load of a shared machine hits both sides alike; with
several ``--threads`` the peer's best is used. PyTorch gets as many threads
as TensorFlow's default intra-op pool (one per usable core) unless
``--threads`` says otherwise.

TF Addons 0.23 and TF Similarity 0.17 need TF ≤ 2.15 and Keras 2 and cannot
share tfdml's environment: they run in a worker of their own under another
interpreter (``--legacy-python``; by default ``~/.cache/tfdml/legacy-peers``'s
if it exists), a venv that ``--make-legacy-venv [DIR]`` makes with Python
3.9–3.11 (TF 2.15 has wheels for no other) and the pins of ``LEGACY_PINS``.
That worker imports neither tfdml nor Keras 3. Without it the losses part
says so in one line and points to their last measured table in
benchmarks/RESULTS.md. The peers: TF Addons' ``TripletSemiHardLoss`` and
``TripletHardLoss`` (ℓ2, margin 0.2) and TF Similarity's ``TripletLoss``
(distance ``"euclidean"``, margin 0.2, positive mining ``"hard"``, negative
mining ``"semi-hard"`` or ``"hard"``). TF Addons' semi-hard loss is tfdml's
``TripletLoss(margin=0.2, squared=False, sampler="semi_hard")``: the same
triplets (every positive pair (a, p), the nearest negative beyond D_ap, else
the farthest one) and the same mean over the B·(m−1) positive pairs (tfdml's
``tuple_reduction="mean"`` over its valid slots; TF Addons: sum over the
positive pairs / their count); the run prints both values on its first
semi-hard batch. TF Similarity mines one positive per anchor, the farthest,
and for semi-hard the nearest negative beyond *that* positive: B triplets, a
different loss. All three take the same triplets for batch-hard, averaged
over the B anchors. TF Addons' semi-hard step tiles [B², B] tensors (a peak
of 19 GiB at B = 1024): where that would take more than half of the
available memory it is left out, with a line saying so.
"""

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

import peers_memory  # noqa: E402  (benchmarks/peers_memory.py: the memory part)

BENCH_HINT = "pip install -e '.[bench]'"
PEERS = {  # module -> distribution, as pip names it
    "torch": "torch",
    "pytorch_metric_learning": "pytorch-metric-learning",
    "faiss": "faiss-cpu",
}
MARGIN = 0.2
TRIPLET_CASES = ("semi-hard triplet", "distance weighted + margin", "batch-hard triplet")
# The other losses, each with the hyper-parameters both sides are built with (tfdml's defaults; PML's
# arguments set to them): TfdmlSide.loss and TorchSide.loss read these, nothing else.
LIFTED_MARGIN = 1.0  # α of Song et al. Eq. 4; PML's neg_margin (pos_margin 0)
BINOMIAL = {"alpha": 2.0, "beta": 0.5, "cost": 25.0}
MULTI_SIMILARITY = {"alpha": 2.0, "beta": 50.0, "lam": 1.0, "epsilon": 0.1}  # PML: base = lam
HISTOGRAM_NODES = 201  # tfdml's num_bins (R nodes on [-1, 1]); PML's n_bins counts the R - 1 intervals
ANGLE = 45.0  # degrees
PROXY_NCA_SCALE = 3.0  # tfdml's embedding_scale = proxy_scale; PML's softmax_scale is its square
PROXY_ANCHOR = {"alpha": 32.0, "delta": 0.1}  # PML: margin = delta
NORMALIZED_SOFTMAX_TEMPERATURE = 0.05
COSFACE = {"scale": 64.0, "margin": 0.35}
ARCFACE = {"scale": 64.0, "margin": 0.5}  # the margin in radians (tfdml); PML takes degrees
SUB_CENTERS = 3  # sub-center ArcFace's K, with ARCFACE's scale and margin
SOFT_TRIPLE = {"centers_per_class": 10, "la": 20.0, "gamma": 0.1, "margin": 0.01}  # tfdml: tau = 0
FAST_AP_BINS = 10
CIRCLE = {"m": 0.4, "gamma": 80.0}  # tfdml: tuple_reduction "mean_active", PML's AvgNonZeroReducer
CONTRAST_TEMPERATURE = 0.1  # NT-Xent's and SupCon's τ on both sides
VICREG = {"lam": 25.0, "mu": 25.0, "nu": 1.0}  # PML: invariance_lambda, variance_mu, covariance_v
EASY_HARD_MARGIN = MARGIN  # the triplet loss's margin, ℓ2, with easy positives and hard negatives
# Pair-margin mining on ℓ2 distances of random unit vectors (√2 ± 0.06 at d = 128): margins where the
# pairs are, so that both positives and negatives are mined; the ℓ2 contrastive loss's margin above them.
PAIR_MARGIN = {"pos_margin": 1.4, "neg_margin": 1.4}
CONTRASTIVE_MARGIN = 1.5  # tfdml's margin, PML's neg_margin (pos_margin 0)
HDC_FILTER = 0.5  # the share of positive and of negative pairs kept (PML HDCMiner's default)
CLASS_WEIGHT_CASES = ("normalized softmax", "CosFace", "ArcFace", "sub-center ArcFace", "SoftTriple")
TWO_VIEW_CASES = ("NT-Xent", "VICReg", "Barlow Twins")  # positives: the views of an instance (example_id)
OTHER_CASES = ("lifted structured", "generalized lifted structured", "binomial deviance",
               "multi-similarity + miner", "histogram", "angular", "proxy NCA", "proxy anchor",
               *CLASS_WEIGHT_CASES, "FastAP", "circle", "SupCon", *TWO_VIEW_CASES, "triplet + easy-hard",
               "contrastive + pair margin", "contrastive + HDC")
LOSS_CASES = TRIPLET_CASES + OTHER_CASES
#: Why the two sides' loss values differ on the same batch; a case not listed computes the same loss
#: (its row says "yes" when they agree within VALUE_RTOL, "NO" otherwise).
DIFFERENT_LOSS = {
    "semi-hard triplet": "PML takes every triplet inside the margin window and averages over the "
                         "triplets with a positive loss",
    "distance weighted + margin": "each side draws its own random negatives",
    "batch-hard triplet": "PML averages over the triplets with a positive loss, tfdml over all B anchors (the "
                          "same value while every anchor's triplet has a positive loss)",
    "angular": "tfdml: Wang et al.'s N-pair batches (m/2 pairs per class, negatives the other classes' "
               "pairs of the same slot); PML: every positive pair against every example of another class",
}
#: Cases whose tfdml value is compared with PML's in PML's form: ``TfdmlSide.pml_form``.
PML_FORM = {
    "proxy NCA": "PML's softmax keeps the own proxy in the denominator: PML = mean softplus(tfdml's term); "
                 "compared in that form",
    "VICReg": "PML's invariance term is the mean squared difference over the d dimensions (tfdml: the sum, "
              "Bardes et al.'s s) and it halves each variance term: PML = λ s/d + μ/2 [v(Z) + v(Z')] + "
              "ν [c(Z) + c(Z')] of tfdml's terms; compared in that form",
    "contrastive + pair margin": "PML averages the mined positive and the mined negative pairs' terms "
                                 "separately, each over its non-zero terms, and adds the two means; tfdml "
                                 "takes one mean over all mined pairs: compared in PML's form, from tfdml's "
                                 "mined pairs and terms",
    "contrastive + HDC": "PML averages the mined positive and the mined negative pairs' terms separately, each "
                         "over its non-zero terms, and adds the two means; tfdml takes one mean over all mined "
                         "pairs: compared in PML's form, from tfdml's mined pairs and terms",
}
NO_PML = {"binomial deviance": "PML has no binomial deviance loss",
          "Barlow Twins": "PML has no Barlow Twins loss"}
VALUE_RTOL = 1e-4
EVAL_METHODS = {"tfdml": "tfdml.metrics", "pml": "PML AccuracyCalculator", "faiss": "faiss IndexFlatL2 + NumPy"}
REPLY = "@@compare_peers "  # marks the worker's answers on its stdout

# The legacy peers' venv (``--make-legacy-venv``). tensorflow-metadata: TF Similarity imports
# tensorflow-datasets, whose newest tensorflow-metadata (1.21) needs protobuf >= 5.26 (TF 2.15: < 5).
LEGACY_PINS = ("tensorflow-cpu==2.15.1", "tensorflow-addons==0.23.0", "tensorflow-similarity==0.17.1",
               "tensorflow-metadata==1.17.3")
LEGACY_PYTHONS = ("3.9", "3.10", "3.11")  # TF 2.15 has wheels for these only
LEGACY_VENV = os.path.join("~", ".cache", "tfdml", "legacy-peers")  # the default DIR; used if it exists
LEGACY_PEERS = ("TF Addons", "TF Similarity")
LEGACY_CASES = ("semi-hard triplet", "batch-hard triplet")  # the losses the legacy peers have
LEGACY_DISTRIBUTIONS = {"TensorFlow": "tensorflow-cpu", "TF Addons": "tensorflow-addons",
                        "TF Similarity": "tensorflow-similarity"}
# Peak bytes per B³ of TF Addons' semi-hard step, which tiles [B², B] tensors (its peak RSS grows as B³;
# RESULTS.md, "Peers side by side").
TFA_SEMI_HARD_BYTES = 19
# Untimed calls of a side before each of its timed calls in ``interleaved``: they absorb the
# spinning threads of the side that ran before (module docstring, ``losses``). A slow call
# settles alone: the untimed calls stop once they took SETTLING_SECONDS.
SETTLING_CALLS = 2
SETTLING_SECONDS = 0.05



# --- helpers -----------------------------------------------------------------------------------

def usable_cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def load_average():
    return " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1 / 5 / 15 min)"


def missing_peers(modules=tuple(PEERS)):
    """{module: message} for each of ``modules`` that is not installed."""
    out = {}
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out[module] = f"{PEERS.get(module, module)} not installed: {BENCH_HINT}"
    return out


def report_missing(modules, what):
    """Print why ``what`` is skipped and return False if one of ``modules`` is missing; True otherwise."""
    missing = missing_peers(modules)
    for message in missing.values():
        print(f"{what} skipped: {message}")
    return not missing


def version(distribution):
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def interleaved(contestants, runs, warmup, settle=SETTLING_CALLS, settle_seconds=SETTLING_SECONDS):
    """Median seconds of each contestant, its calls interleaved with the others'.

    ``contestants``: name -> zero-argument callable that does one call and
    returns the seconds it took (measured where the work runs). Each gets
    ``warmup`` calls, then ``runs`` rounds in which each, in turn, makes
    untimed calls (``settle`` of them, fewer once they took ``settle_seconds``)
    and one timed call."""
    for call in contestants.values():
        for _ in range(warmup):
            call()
    times = {name: [] for name in contestants}
    for _ in range(runs):
        for name, call in contestants.items():
            settled, spent = 0, 0.0
            while settled < settle and spent < settle_seconds:
                spent += call()
                settled += 1
            times[name].append(call())
    return {name: statistics.median(t) for name, t in times.items()}


def ratio(ours, theirs):
    """``ours / theirs`` as a table cell (two significant digits below 0.1); '–' when either side is missing."""
    if ours is None or theirs is None:
        return "–"
    value = ours / theirs
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"


def cell(seconds, scale=1000.0, digits=2):
    return "–" if seconds is None else f"{scale * seconds:.{digits}f}"


def available_memory():
    """Bytes of memory available to new allocations (Linux's MemAvailable); None where unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return 1024 * int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def too_big_for_tfa(batch, available):
    """Why TF Addons' semi-hard step at B = ``batch`` is not run, or None: it is when its estimated peak
    (``TFA_SEMI_HARD_BYTES`` · B³) fits in half of the ``available`` bytes (None: unknown, run it)."""
    need = TFA_SEMI_HARD_BYTES * batch ** 3
    if available is None or need <= available / 2:
        return None
    return (f"its [B², B] tensors would take ~{need / 2**30:.0f} GiB at B = {batch}, more than half of the "
            f"{available / 2**30:.0f} GiB available")


def thread_label(threads):
    return f"{threads} thread{'s' if threads != 1 else ''}"


# --- the legacy peers' interpreter -------------------------------------------------------------

def venv_python(directory):
    """The interpreter of the venv in ``directory`` (``~`` expanded)."""
    return os.path.join(os.path.expanduser(directory), "bin", "python")


def default_legacy_python():
    """The interpreter of the venv at ``LEGACY_VENV`` if there is one, else None."""
    python = venv_python(LEGACY_VENV)
    return python if os.path.exists(python) else None


def python_version(python):
    """``"3.11"`` for the interpreter ``python`` (a path or a command); None if it does not run."""
    try:
        done = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def make_legacy_venv(directory, python="python3.11"):
    """Make a venv in ``directory`` with ``python`` and pip-install ``LEGACY_PINS``; return its interpreter.

    Refuses (SystemExit, before creating anything) an interpreter that does not
    run or is not Python 3.9–3.11: TF 2.15 has wheels for those only."""
    found = python_version(python)
    if found is None:
        raise SystemExit(f"--make-legacy-venv: cannot run {python!r}; pass a Python 3.9–3.11 with --venv-python.")
    if found not in LEGACY_PYTHONS:
        raise SystemExit(f"--make-legacy-venv: {python} is Python {found}, but TensorFlow 2.15 (which TF Addons 0.23 "
                         "and TF Similarity 0.17 need) has wheels only for Python 3.9–3.11; pass one of those with "
                         "--venv-python.")
    directory = os.path.expanduser(directory)
    subprocess.run([python, "-m", "venv", directory], check=True)
    subprocess.run([venv_python(directory), "-m", "pip", "install", *LEGACY_PINS], check=True)
    return venv_python(directory)


def legacy_worker(python):
    """(worker, info) of the legacy peers under ``python``; None after one line saying why they are skipped."""
    why = None
    if python is None:
        why = f"no --legacy-python and no venv at {LEGACY_VENV}"
    elif not os.path.exists(python):
        why = f"{python} not found"
    else:
        worker = None
        try:
            worker = Worker("legacy", python)
            return worker, worker.ask("info")
        except (RuntimeError, OSError) as err:  # a library missing, a worker that died or did not start
            if worker:
                worker.close()
            why = str(err)
    print(f"TF Addons and TF Similarity skipped ({why}); make their venv with `python benchmarks/compare_peers.py "
          f"--make-legacy-venv` (Python 3.9–3.11; {LEGACY_VENV}, used by default) or pass --legacy-python.")
    return None


# --- the three sides, each in its own process --------------------------------------------------

class TfSide:
    """What the two TensorFlow workers share: quiet TensorFlow, timed calls of ``self.calls``."""

    def __init__(self):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        tf.get_logger().setLevel("ERROR")  # the retracing notes of one tf.function per case
        self.calls = {}

    def keep(self, name, step, *args):
        """Keep ``step(*args)`` as the call ``name``: it returns once its results are computed (NumPy)."""
        import tensorflow as tf

        self.calls[name] = lambda: tf.nest.map_structure(lambda t: t.numpy(), step(*args))

    def call(self, name):
        start = time.perf_counter()
        self.calls[name]()
        return {"seconds": time.perf_counter() - start}


class TfdmlSide(TfSide, peers_memory.TfdmlMemory):
    """Runs in the tfdml worker: TensorFlow, tfdml and the existing benchmark helpers."""

    def info(self):
        import machine
        import tensorflow as tf

        return {"machine": machine.describe(),
                "threads": tf.config.threading.get_intra_op_parallelism_threads() or usable_cores()}

    def losses(self, case, batch, per_class, dim, path):
        """Build the graph and XLA step of ``case`` on bench_losses' batch; save that batch (its
        labels, the instance ids of its two views, and a proxy loss's proxies or class weights,
        [classes · K, dim]) for PML. Answers the loss value of the graph step and, for a case of
        ``PML_FORM``, tfdml's value in PML's form."""
        import bench_losses
        import numpy as np

        classes = batch // per_class
        y, e = bench_losses.batch(classes, per_class, dim)
        loss = self.loss(case, classes, dim)
        arrays = {"embeddings": e.numpy(), "labels": y["label"].numpy(), "views": y["example_id"].numpy()}
        if hasattr(loss, "proxy_layer"):
            arrays["proxies"] = loss.proxy_layer.proxies.numpy()
        np.savez(path, **arrays)
        self.calls = {}
        for mode, jit in (("graph", False), ("xla", True)):
            step = bench_losses.step_fn(loss, jit)
            self.keep(mode, step, y, e)
        pml_form = self.pml_form(case, loss, y, e) if case in PML_FORM else None
        return {"names": list(self.calls), "value": float(self.calls["graph"]()[0]), "pml_form": pml_form}

    @staticmethod
    def pml_form(case, loss, y, e):
        """tfdml's loss of ``case`` on (``y``, ``e``) written as PML computes it (``PML_FORM``)."""
        import tensorflow as tf

        from tfdml import targets as targets_lib
        from tfdml.losses import views

        if case == "proxy NCA":  # −log(e^{−d_y} / Σ_z e^{−d_z}) = softplus(d_y + log Σ_{z≠y} e^{−d_z})
            terms = loss.example_terms(y["label"], e, loss.proxy_layer.proxies)
            return float(tf.reduce_mean(tf.math.softplus(terms)))
        if case == "VICReg":
            invariance, variance, covariance = loss.terms(*views.paired_views(e, y["example_id"]))
            dim = float(e.shape[1])
            return float(loss.lam * invariance / dim + loss.mu * variance / 2.0 + loss.nu * covariance)
        if case in ("contrastive + pair margin", "contrastive + HDC"):  # PML: mean of the non-zero positive
            # terms + that of the negative
            targets = targets_lib.unpack(y)
            dist = loss.distances(e)
            mined = loss.pair_weights(dist, targets, e)

            def mean_of_nonzero(terms):
                active = tf.reduce_sum(tf.cast(terms > 0, terms.dtype))
                return tf.reduce_sum(terms) / tf.maximum(active, 1.0)

            return float(mean_of_nonzero(mined.pos_weight * dist)
                         + mean_of_nonzero(mined.neg_weight * tf.nn.relu(loss.margin - dist)))
        raise ValueError(f"no PML form for {case!r}")

    @staticmethod
    def loss(case, num_classes, dim=128):
        """tfdml's loss (and sampler) of ``case``, with the hyper-parameters of this module."""
        from tfdml import losses, samplers

        if case == "semi-hard triplet":
            return losses.TripletLoss(margin=MARGIN, squared=False, sampler="semi_hard")
        if case == "distance weighted + margin":
            return losses.MarginLoss(alpha=MARGIN, num_classes=num_classes, sampler="distance_weighted", seed=1)
        if case == "batch-hard triplet":
            return losses.TripletLoss(margin=MARGIN, squared=False, sampler="hard")
        if case in ("lifted structured", "generalized lifted structured"):
            return losses.LiftedStructuredLoss(margin=LIFTED_MARGIN, generalized=case.startswith("generalized"))
        if case == "binomial deviance":
            return losses.BinomialDevianceLoss(**BINOMIAL)
        if case == "multi-similarity + miner":
            ms = dict(MULTI_SIMILARITY)
            sampler = samplers.MultiSimilaritySampler(epsilon=ms.pop("epsilon"))
            return losses.MultiSimilarityLoss(sampler=sampler, **ms)
        if case == "histogram":
            return losses.HistogramLoss(num_bins=HISTOGRAM_NODES)
        if case == "angular":
            return losses.AngularLoss(alpha=ANGLE)
        if case == "proxy NCA":
            return losses.ProxyNCALoss(num_classes=num_classes, embedding_dim=dim, embedding_scale=PROXY_NCA_SCALE,
                                       proxy_scale=PROXY_NCA_SCALE, seed=1)
        if case == "proxy anchor":
            return losses.ProxyAnchorLoss(num_classes=num_classes, embedding_dim=dim, seed=1, **PROXY_ANCHOR)
        classes = {"num_classes": num_classes, "embedding_dim": dim, "seed": 1}
        if case == "normalized softmax":
            return losses.NormalizedSoftmaxLoss(temperature=NORMALIZED_SOFTMAX_TEMPERATURE, **classes)
        if case == "CosFace":
            return losses.CosFaceLoss(**COSFACE, **classes)
        if case == "ArcFace":
            return losses.ArcFaceLoss(**ARCFACE, **classes)
        if case == "sub-center ArcFace":
            return losses.SubCenterArcFaceLoss(centers_per_class=SUB_CENTERS, **ARCFACE, **classes)
        if case == "SoftTriple":  # PML has no centre regulariser: τ = 0
            return losses.SoftTripleLoss(tau=0.0, **SOFT_TRIPLE, **classes)
        if case == "FastAP":
            return losses.FastAPLoss(num_bins=FAST_AP_BINS)
        if case == "circle":
            return losses.CircleLoss(tuple_reduction="mean_active", **CIRCLE)
        if case == "SupCon":
            return losses.SupConLoss(temperature=CONTRAST_TEMPERATURE)
        if case == "NT-Xent":
            return losses.NTXentLoss(temperature=CONTRAST_TEMPERATURE)
        if case == "VICReg":
            return losses.VICRegLoss(**VICREG)
        if case == "Barlow Twins":
            return losses.BarlowTwinsLoss()
        if case == "triplet + easy-hard":  # PML's AvgNonZeroReducer: the mean over the active triplets
            return losses.TripletLoss(margin=EASY_HARD_MARGIN, squared=False, tuple_reduction="mean_active",
                                      sampler=samplers.EasyHardSampler(negative="hard"))
        if case == "contrastive + pair margin":
            return losses.ContrastiveLoss(margin=CONTRASTIVE_MARGIN, squared=False,
                                          sampler=samplers.PairMarginSampler(**PAIR_MARGIN))
        if case == "contrastive + HDC":
            return losses.ContrastiveLoss(margin=CONTRASTIVE_MARGIN, squared=False,
                                          sampler=samplers.HDCSampler(HDC_FILTER))
        raise ValueError(f"unknown case {case!r}; choose from {LOSS_CASES}")

    def fit_batch(self, batch, per_class, path):
        import bench_fit_step
        import numpy as np

        images, labels = bench_fit_step.batch_arrays(batch, per_class)
        np.savez(path, images=images, labels=labels, targets=bench_fit_step.network_targets(batch))
        return {}

    def fit(self, mode, batch, warmup, steps, network_only=False):
        import bench_fit_step

        if network_only:
            return {"times": bench_fit_step.time_network(mode, batch, warmup, steps)}
        return {"times": bench_fit_step.time_mode(mode, "margin", "distance_weighted", batch, warmup, steps)}


class LegacySide(TfSide):
    """Runs in the legacy worker (TF 2.15, Keras 2): TF Addons and TF Similarity, neither tfdml nor Keras 3."""

    def __init__(self):
        import warnings

        warnings.filterwarnings("ignore", category=UserWarning, module="tensorflow_addons")  # its end-of-life note
        import tensorflow_addons  # noqa: F401  (fail here, at "info", if a library is missing)
        import tensorflow_similarity  # noqa: F401

        super().__init__()

    def info(self):
        import tensorflow as tf

        return {"versions": {name: version(d) for name, d in LEGACY_DISTRIBUTIONS.items()},
                "threads": tf.config.threading.get_intra_op_parallelism_threads() or usable_cores()}

    @staticmethod
    def loss(case):
        """{peer: loss} for ``case``: ℓ2 distance, margin ``MARGIN``; {} where no legacy peer has it."""
        import tensorflow_addons as tfa
        from tensorflow_similarity.losses import TripletLoss

        if case == "semi-hard triplet":
            return {"TF Addons": tfa.losses.TripletSemiHardLoss(margin=MARGIN, distance_metric="L2"),
                    "TF Similarity": TripletLoss(distance="euclidean", positive_mining_strategy="hard",
                                                 negative_mining_strategy="semi-hard", margin=MARGIN)}
        if case == "distance weighted + margin" or case in OTHER_CASES:
            return {}
        if case == "batch-hard triplet":
            return {"TF Addons": tfa.losses.TripletHardLoss(margin=MARGIN, distance_metric="L2"),
                    "TF Similarity": TripletLoss(distance="euclidean", positive_mining_strategy="hard",
                                                 negative_mining_strategy="hard", margin=MARGIN)}
        raise ValueError(f"unknown case {case!r}; choose from {LOSS_CASES}")

    def losses(self, case, path):
        """A ``tf.function`` step (loss, its gradient w.r.t. the embeddings) per peer of ``case`` on the saved batch."""
        import numpy as np
        import tensorflow as tf

        data = np.load(path)
        y, e = tf.constant(data["labels"]), tf.constant(data["embeddings"])
        peers, skipped = self.loss(case), {}
        why = too_big_for_tfa(len(data["labels"]), available_memory()) if case == "semi-hard triplet" else None
        if why:
            del peers["TF Addons"]
            skipped["TF Addons"] = why
        self.calls, values = {}, {}
        for name, loss in peers.items():
            step = tf.function(lambda y, e, loss=loss: legacy_step(loss, y, e))
            self.keep(name, step, y, e)
            values[name] = float(self.calls[name]()[0])
        return {"names": list(self.calls), "values": values, "skipped": skipped}


def legacy_step(loss, y, e):
    """(loss, d loss / d e) of a Keras 2 loss, as ``bench_losses.step_fn`` for tfdml (no loss parameters here)."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch(e)
        value = loss(y, e)
    return value, tape.gradient(value, e)


class TorchSide(peers_memory.TorchMemory):
    """Runs in the PyTorch worker: PyTorch and pytorch-metric-learning, no TensorFlow."""

    def __init__(self):
        import warnings

        import torch

        # PML's HistogramLoss indexes with a list, which this PyTorch warns about on every call.
        warnings.filterwarnings("ignore", category=UserWarning, module="pytorch_metric_learning")
        self.torch = torch
        self.call_ = None

    def info(self):
        return {"threads": self.torch.get_num_threads()}

    @staticmethod
    def loss(case, num_classes, dim=128):
        """(loss, miner or None) of pytorch-metric-learning for ``case`` with this module's
        hyper-parameters; None for a case of ``NO_PML``. Distances are PML's defaults (ℓ2 on
        L2-normalised embeddings, or cosine similarity) unless set here."""
        from pytorch_metric_learning import losses, miners

        if case == "semi-hard triplet":
            return (losses.TripletMarginLoss(margin=MARGIN),
                    miners.TripletMarginMiner(margin=MARGIN, type_of_triplets="semihard"))
        if case == "distance weighted + margin":
            return (losses.MarginLoss(margin=MARGIN, beta=1.2, learn_beta=True, num_classes=num_classes),
                    miners.DistanceWeightedMiner(cutoff=0.5, nonzero_loss_cutoff=1.4))
        if case == "batch-hard triplet":
            return losses.TripletMarginLoss(margin=MARGIN), miners.BatchHardMiner()
        if case == "lifted structured":  # Song et al. Eq. 4, per positive pair: tfdml's generalized=False
            return losses.LiftedStructureLoss(neg_margin=LIFTED_MARGIN, pos_margin=0), None
        if case == "generalized lifted structured":  # Hermans et al., per anchor: tfdml's generalized=True
            return losses.GeneralizedLiftedStructureLoss(neg_margin=LIFTED_MARGIN, pos_margin=0), None
        if case in NO_PML:
            return None
        if case == "multi-similarity + miner":
            ms = MULTI_SIMILARITY
            return (losses.MultiSimilarityLoss(alpha=ms["alpha"], beta=ms["beta"], base=ms["lam"]),
                    miners.MultiSimilarityMiner(epsilon=ms["epsilon"]))
        if case == "histogram":
            return losses.HistogramLoss(n_bins=HISTOGRAM_NODES - 1), None
        if case == "angular":
            return losses.AngularLoss(alpha=ANGLE), None
        if case == "proxy NCA":  # ‖s x̂ − s p̂‖² = s² ‖x̂ − p̂‖²: PML's LpDistance(power=2) times softmax_scale
            return losses.ProxyNCALoss(num_classes, dim, softmax_scale=PROXY_NCA_SCALE ** 2), None
        if case == "proxy anchor":
            return (losses.ProxyAnchorLoss(num_classes, dim, margin=PROXY_ANCHOR["delta"],
                                           alpha=PROXY_ANCHOR["alpha"]), None)
        classes = {"num_classes": num_classes, "embedding_size": dim}
        if case == "normalized softmax":
            return losses.NormalizedSoftmaxLoss(temperature=NORMALIZED_SOFTMAX_TEMPERATURE, **classes), None
        if case == "CosFace":
            return losses.CosFaceLoss(**COSFACE, **classes), None
        if case in ("ArcFace", "sub-center ArcFace"):  # PML's margin in degrees
            arcface = dict(ARCFACE, margin=math.degrees(ARCFACE["margin"]), **classes)
            if case == "ArcFace":
                return losses.ArcFaceLoss(**arcface), None
            return losses.SubCenterArcFaceLoss(sub_centers=SUB_CENTERS, **arcface), None
        if case == "SoftTriple":
            return losses.SoftTripleLoss(**SOFT_TRIPLE, **classes), None
        if case == "FastAP":
            return losses.FastAPLoss(num_bins=FAST_AP_BINS), None
        if case == "circle":
            return losses.CircleLoss(**CIRCLE), None
        if case == "SupCon":
            return losses.SupConLoss(temperature=CONTRAST_TEMPERATURE), None
        if case == "NT-Xent":
            return losses.NTXentLoss(temperature=CONTRAST_TEMPERATURE), None
        if case == "VICReg":
            return (losses.VICRegLoss(invariance_lambda=VICREG["lam"], variance_mu=VICREG["mu"],
                                      covariance_v=VICREG["nu"]), None)
        if case == "triplet + easy-hard":
            return (losses.TripletMarginLoss(margin=EASY_HARD_MARGIN),
                    miners.BatchEasyHardMiner(pos_strategy="easy", neg_strategy="hard"))
        if case == "contrastive + pair margin":
            return (losses.ContrastiveLoss(pos_margin=0, neg_margin=CONTRASTIVE_MARGIN),
                    miners.PairMarginMiner(**PAIR_MARGIN))
        if case == "contrastive + HDC":
            return (losses.ContrastiveLoss(pos_margin=0, neg_margin=CONTRASTIVE_MARGIN),
                    miners.HDCMiner(filter_percentage=HDC_FILTER))
        raise ValueError(f"unknown case {case!r}; choose from {LOSS_CASES}")

    def losses(self, case, batch, per_class, path):
        """PML's step of ``case`` (miner, loss, backward to the embeddings and the loss's parameters) on
        the saved batch, with tfdml's proxies or class weights where it saved them. The losses of two
        views take the instance ids as labels (VICReg: the first views as ``embeddings``, the second
        as ``ref_emb``). Answers what the miner selected (``mined``) and the loss value;
        ``{"missing": why}`` for a case PML does not have."""
        import numpy as np

        torch = self.torch
        data = np.load(path)
        emb = torch.from_numpy(data["embeddings"]).requires_grad_()
        labels = torch.from_numpy(data["views" if case in TWO_VIEW_CASES else "labels"].astype(np.int64))
        made = self.loss(case, batch // per_class, emb.shape[1])
        if made is None:
            self.call_ = None
            return {"missing": NO_PML[case]}
        loss, miner = made
        if "proxies" in data:
            copy_proxies(loss, torch.from_numpy(data["proxies"]))
        params = list(loss.parameters())
        if case == "VICReg":  # rows 2k and 2k + 1 are the views of one instance: split by the ids
            order = torch.from_numpy(np.argsort(data["views"], kind="stable"))
            first, second = order[0::2], order[1::2]

            def forward():
                return loss(emb[first], ref_emb=emb[second])
        else:
            def forward():
                return loss(emb, labels, miner(emb, labels) if miner else None)

        def call():
            emb.grad = None
            for p in params:
                p.grad = None
            value = forward()
            value.backward()
            return value.item()

        self.call_ = call
        return {"mined": mined_count(miner(emb, labels)) if miner else "no miner", "value": call()}

    def call(self, threads):
        self.torch.set_num_threads(threads)
        start = time.perf_counter()
        self.call_()
        return {"seconds": time.perf_counter() - start}

    def fit(self, batch, per_class, warmup, steps, threads, path, network_only=False):
        """Seconds per step of the PyTorch + PML training loop (fresh model), after ``warmup`` steps;
        ``network_only``: the mean squared error to bench_fit_step's fixed targets instead of PML."""
        import numpy as np

        torch = self.torch
        torch.set_num_threads(threads)
        data = np.load(path)
        x = torch.from_numpy(np.ascontiguousarray(data["images"].transpose(0, 3, 1, 2)))  # NHWC -> NCHW
        y = torch.from_numpy(data["labels"].astype(np.int64))
        net = torch_network()
        if network_only:
            targets = torch.from_numpy(data["targets"])
            parameters = list(net.parameters())

            def objective(embeddings):
                return torch.nn.functional.mse_loss(embeddings, targets)
        else:
            loss_fn, miner = self.loss("distance weighted + margin", batch // per_class)
            parameters = list(net.parameters()) + list(loss_fn.parameters())

            def objective(embeddings):
                return loss_fn(embeddings, y, miner(embeddings, y))
        optimizer = torch.optim.Adam(parameters, lr=1e-3)
        net.train()
        times = []
        for step in range(warmup + steps):
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            embeddings = net(x)
            loss = objective(embeddings)
            loss.backward()
            optimizer.step()
            loss.item()
            if step >= warmup:
                times.append(time.perf_counter() - start)
        return {"times": times}


#: Where PML keeps a loss's learned class vectors, and whether its layout is tfdml's
#: [classes · K, dim] transposed ([dim, classes · K]): ProxyNCA and ProxyAnchor's ``proxies``,
#: the classification losses' ``W``, SoftTriple's ``fc``.
PML_CLASS_VECTORS = {"proxies": False, "W": True, "fc": True}


def copy_proxies(loss, proxies):
    """Set PML ``loss``'s class vectors to tfdml's ``proxies`` (a [classes · K, dim] tensor; row
    c·K + k the k-th vector of class c, PML's column order too), so both sides start alike."""
    import torch

    for name, transposed in PML_CLASS_VECTORS.items():
        target = getattr(loss, name, None)
        if isinstance(target, torch.nn.Parameter):
            value = proxies.t() if transposed else proxies
            if tuple(target.shape) != tuple(value.shape):
                raise ValueError(f"PML's {type(loss).__name__}.{name} is {tuple(target.shape)}, tfdml's proxies "
                                 f"give {tuple(value.shape)}")
            with torch.no_grad():
                target.copy_(value)
            return
    raise ValueError(f"PML's {type(loss).__name__} has none of {', '.join(PML_CLASS_VECTORS)} to copy the proxies to")


def mined_count(indices):
    """What a PML miner returned, as a table cell: its triplets, or its positive + negative pairs."""
    if len(indices) == 3:
        return f"{len(indices[0])} triplets"
    return f"{len(indices[0])} + {len(indices[2])} pairs"


def torch_network(embedding_dim=128, widths=(32, 64, 128, 256)):
    """bench_fit_step.network in PyTorch: the same layers, BatchNorm with Keras' epsilon and momentum."""
    import torch
    from torch import nn

    class L2Normalize(nn.Module):
        def forward(self, x):
            return nn.functional.normalize(x, dim=1)

    layers, channels = [], 1
    for width in widths:
        layers += [nn.Conv2d(channels, width, 3, padding=1, bias=False),
                   nn.BatchNorm2d(width, eps=1e-3, momentum=0.01), nn.ReLU(), nn.MaxPool2d(2)]
        channels = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, embedding_dim), L2Normalize()]
    torch.manual_seed(0)
    return nn.Sequential(*layers)


def serve(side):
    """The worker's loop: one JSON request per line on stdin, one marked JSON answer per line on stdout."""
    out, sys.stdout = sys.stdout, sys.stderr  # whatever the libraries print stays off the answers
    handler = None
    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        if op == "exit":
            break
        try:
            if handler is None:
                handler = {"tfdml": TfdmlSide, "torch": TorchSide, "legacy": LegacySide}[side]()
            answer = getattr(handler, op)(**request)
        except Exception as err:  # reported to the parent, which raises it
            answer = {"error": f"{type(err).__name__}: {err}"}
        out.write(REPLY + json.dumps(answer) + "\n")
        out.flush()


class WorkerDied(RuntimeError):
    """A worker process ended without answering (e.g. killed by the system for its memory)."""


class Worker:
    """One side in a process of its own (``PYTHON compare_peers.py --worker SIDE``).

    ``python``: the interpreter, this one by default; the legacy side's is that of its own venv."""

    def __init__(self, side, python=sys.executable):
        self.side, self.python = side, python
        self._start()

    def _start(self):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
        self.proc = subprocess.Popen([self.python, os.path.abspath(__file__), "--worker", self.side],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def restart(self):
        """A fresh process for this side (after :class:`WorkerDied`)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._start()

    def ask(self, op, **request):
        try:
            self.proc.stdin.write(json.dumps(dict(request, op=op)) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it has exited: said below
        for line in self.proc.stdout:
            if line.startswith(REPLY):
                answer = json.loads(line[len(REPLY):])
                if "error" in answer:
                    raise RuntimeError(f"{self.side} worker, {op}: {answer['error']}")
                return answer
        status = self.proc.wait()
        killed = " (killed: out of memory?)" if status == -9 else ""
        raise WorkerDied(f"the {self.side} worker exited with status {status} during '{op}'{killed}")

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.close()
            except BrokenPipeError:  # it is exiting already
                pass
            self.proc.wait()


# --- the three parts ---------------------------------------------------------------------------

def timed(worker, **request):
    """A contestant for :func:`interleaved`: one ``call`` of ``worker``, returning the seconds it measured."""
    return lambda: worker.ask("call", **request)["seconds"]


def loss_ratio_columns(legacy_columns):
    """The ratio columns of the losses table: tfdml against PML in each mode; against TF Addons and
    TF Similarity, graph mode (the same kind of step as theirs) and tfdml's best mode (goal 1 of
    the comparison reads that one)."""
    return (["graph / PML", "XLA / PML"] + [f"graph / {name}" for name in legacy_columns]
            + [f"best / {name}" for name in legacy_columns])


def loss_row_cells(median, pml_columns, legacy_columns):
    """A losses row's times and ratios (ms) from the median seconds of each contestant; the
    fastest PML column stands for PML, the faster of tfdml's graph and XLA steps for "best"."""
    pml = min((median[c] for c in pml_columns if c in median), default=None)
    best = min(median["graph"], median["xla"])
    return ([cell(median["graph"]), cell(median["xla"])]
            + [cell(median.get(c)) for c in pml_columns + legacy_columns]
            + [ratio(median["graph"], pml), ratio(median["xla"], pml)]
            + [ratio(median["graph"], median.get(c)) for c in legacy_columns]
            + [ratio(best, median.get(c)) for c in legacy_columns])


def settings_lines(cases):
    """One line per case of ``cases``: the hyper-parameters both sides are built with."""
    ms = MULTI_SIMILARITY
    text = {
        "semi-hard triplet": f"margin {MARGIN}, ℓ2; tfdml TripletLoss(squared=False, sampler='semi_hard'), PML "
                             "TripletMarginLoss + TripletMarginMiner('semihard')",
        "distance weighted + margin": f"α = margin {MARGIN}, β0 = 1.2 learned per class; tfdml MarginLoss + "
                                      "'distance_weighted', PML MarginLoss + DistanceWeightedMiner",
        "batch-hard triplet": f"margin {MARGIN}, ℓ2; tfdml TripletLoss(sampler='hard'), PML TripletMarginLoss + "
                              "BatchHardMiner",
        "lifted structured": f"Song et al. Eq. 4, α = {LIFTED_MARGIN}, euclidean, every pair; tfdml "
                             "LiftedStructuredLoss, PML LiftedStructureLoss(neg_margin=α, pos_margin=0)",
        "generalized lifted structured": f"Hermans et al., α = {LIFTED_MARGIN}, every pair; tfdml "
                                         "LiftedStructuredLoss(generalized=True), PML "
                                         "GeneralizedLiftedStructureLoss(neg_margin=α, pos_margin=0)",
        "binomial deviance": f"α = {BINOMIAL['alpha']}, β = {BINOMIAL['beta']}, C = {BINOMIAL['cost']}, cosine, "
                             f"every pair; tfdml BinomialDevianceLoss; {NO_PML['binomial deviance']}",
        "multi-similarity + miner": f"α = {ms['alpha']}, β = {ms['beta']}, λ = {ms['lam']}, mining ε = "
                                    f"{ms['epsilon']}, cosine; tfdml MultiSimilarityLoss + MultiSimilaritySampler, "
                                    "PML MultiSimilarityLoss(base=λ) + MultiSimilarityMiner",
        "histogram": f"{HISTOGRAM_NODES} nodes on [−1, 1], cosine, every pair; tfdml HistogramLoss(num_bins="
                     f"{HISTOGRAM_NODES}), PML HistogramLoss(n_bins={HISTOGRAM_NODES - 1}) (intervals)",
        "angular": f"α = {ANGLE:g}°, Eq. 8; tfdml AngularLoss, PML AngularLoss",
        "proxy NCA": f"one proxy per class (tfdml's, copied to PML), d = ‖{PROXY_NCA_SCALE:g}x̂ − "
                     f"{PROXY_NCA_SCALE:g}p̂‖²; tfdml ProxyNCALoss(embedding_scale = proxy_scale = "
                     f"{PROXY_NCA_SCALE:g}), PML ProxyNCALoss(softmax_scale={PROXY_NCA_SCALE ** 2:g})",
        "proxy anchor": f"one proxy per class (tfdml's, copied to PML), α = {PROXY_ANCHOR['alpha']:g}, δ = "
                        f"{PROXY_ANCHOR['delta']}, cosine; tfdml ProxyAnchorLoss, PML ProxyAnchorLoss(margin=δ)",
        "normalized softmax": f"one weight per class (tfdml's, copied to PML's W), σ = "
                              f"{NORMALIZED_SOFTMAX_TEMPERATURE}, cosine, mean over the batch; tfdml "
                              "NormalizedSoftmaxLoss, PML NormalizedSoftmaxLoss (a dot product with the normalised "
                              "weights: the same on these unit embeddings)",
        "CosFace": f"one weight per class (copied), s = {COSFACE['scale']:g}, m = {COSFACE['margin']}, mean; tfdml "
                   "CosFaceLoss, PML CosFaceLoss",
        "ArcFace": f"one weight per class (copied), s = {ARCFACE['scale']:g}, m = {ARCFACE['margin']} rad, mean; "
                   f"tfdml ArcFaceLoss(margin={ARCFACE['margin']}), PML ArcFaceLoss(margin="
                   f"{math.degrees(ARCFACE['margin']):.4g}) (degrees); PML replaces cos(θ + m) by cos θ − m sin m "
                   "for θ > π − m, tfdml keeps Eq. 3 (random unit vectors stay far from that angle)",
        "sub-center ArcFace": f"{SUB_CENTERS} sub-centres per class (copied), ArcFace's s and m; tfdml "
                              f"SubCenterArcFaceLoss(centers_per_class={SUB_CENTERS}), PML SubCenterArcFaceLoss("
                              f"sub_centers={SUB_CENTERS}, margin in degrees)",
        "SoftTriple": f"K = {SOFT_TRIPLE['centers_per_class']} centres per class (copied to PML's fc), λ = "
                      f"{SOFT_TRIPLE['la']:g}, γ = {SOFT_TRIPLE['gamma']}, δ = {SOFT_TRIPLE['margin']}, mean; tfdml "
                      "SoftTripleLoss(tau=0): PML has no centre regulariser; PML SoftTripleLoss",
        "FastAP": f"{FAST_AP_BINS} bins, squared ℓ2 of unit vectors, mean over the queries with a positive; tfdml "
                  "FastAPLoss, PML FastAPLoss",
        "circle": f"m = {CIRCLE['m']}, γ = {CIRCLE['gamma']:g}, cosine, every pair, the mean over the anchors with a "
                  "non-zero loss; tfdml CircleLoss(tuple_reduction='mean_active'), PML CircleLoss (AvgNonZeroReducer)",
        "SupCon": f"τ = {CONTRAST_TEMPERATURE}, cosine, positives the class, mean over the anchors; tfdml SupConLoss, "
                  "PML SupConLoss",
        "NT-Xent": f"τ = {CONTRAST_TEMPERATURE}, cosine, positives the other view of the instance (ids: example_id, "
                   "rows 2k and 2k + 1), mean over both orders of every pair; tfdml NTXentLoss, PML "
                   f"NTXentLoss(temperature={CONTRAST_TEMPERATURE}) with the instance ids as labels",
        "VICReg": f"λ = {VICREG['lam']:g}, μ = {VICREG['mu']:g}, ν = {VICREG['nu']:g}, γ = 1, ε = 1e-4, on the two "
                  "views (first views Z, second Z'); tfdml VICRegLoss, PML VICRegLoss(embeddings=Z, ref_emb=Z')",
        "Barlow Twins": f"λ = 5e-3 on the two views; tfdml BarlowTwinsLoss; {NO_PML['Barlow Twins']}",
        "triplet + easy-hard": f"margin {EASY_HARD_MARGIN}, ℓ2, per anchor the closest positive and the closest "
                               "negative (Xuan et al.'s EPHN), the mean over the triplets with a positive loss; "
                               "tfdml TripletLoss(sampler=EasyHardSampler('hard'), tuple_reduction='mean_active'), "
                               "PML TripletMarginLoss + BatchEasyHardMiner('easy', 'hard')",
        "contrastive + pair margin": f"ℓ2, positive pairs farther than {PAIR_MARGIN['pos_margin']} and negative "
                                     f"pairs closer than {PAIR_MARGIN['neg_margin']} (where this batch's distances "
                                     f"are), terms D and [{CONTRASTIVE_MARGIN} − D]_+; tfdml ContrastiveLoss("
                                     f"squared=False, margin={CONTRASTIVE_MARGIN}) + PairMarginSampler, PML "
                                     f"ContrastiveLoss(pos_margin=0, neg_margin={CONTRASTIVE_MARGIN}) + PairMarginMiner",
        "contrastive + HDC": f"ℓ2, of the batch's positive pairs the {HDC_FILTER:g} farthest and of its negative "
                             f"pairs the {HDC_FILTER:g} closest (Yuan et al. 2017), terms D and "
                             f"[{CONTRASTIVE_MARGIN} − D]_+; tfdml ContrastiveLoss(squared=False, "
                             f"margin={CONTRASTIVE_MARGIN}) + HDCSampler, PML ContrastiveLoss(pos_margin=0, "
                             f"neg_margin={CONTRASTIVE_MARGIN}) + HDCMiner",
    }
    return [f"- {case}: {text[case]}." for case in cases]


def same_loss_cell(case, ours, theirs, pml_form=PML_FORM, no_pml=NO_PML, different=DIFFERENT_LOSS):
    """The "same loss?" cell of a row: tfdml's answer ``ours`` (its ``value`` and ``pml_form``)
    against PML's value ``theirs`` (None: PML not run or without this loss). The cases compared
    in PML's form, without a PML counterpart and known to be other losses: the losses part's
    tables by default (the memory part passes its own)."""
    if case in no_pml:
        return "no PML counterpart"
    if theirs is None:
        return "–"
    reference = ours["pml_form"] if ours.get("pml_form") is not None else ours["value"]
    delta = reference - theirs
    if abs(delta) <= VALUE_RTOL * max(1.0, abs(theirs)):
        return f"yes{', in PML form' if case in pml_form else ''} (Δ {delta:.1e})"
    if case in different:
        return "no: another loss (below)"
    return f"**NO** (Δ {delta:.1e})"


def joined_cells(rows):
    """One table row from the rows of one case at several B: each cell the rows' cells joined
    by " / " in the order of the batches, or their common value when they agree."""
    return [column[0] if len(set(column)) == 1 else " / ".join(column) for column in zip(*rows)]


def part_losses(tfdml, peer, batches, runs, warmup, per_class, dim, threads, scratch, cases=LOSS_CASES, legacy=None):
    """The losses part; ``legacy``: the worker of TF Addons + TF Similarity, or None (not run; RESULTS.md has their last figures)."""
    print(f"\n## Loss + miner, forward + backward (B × {dim} unit embeddings, m = {per_class} per class)\n")
    print(f"Median of {runs} interleaved rounds after {warmup} warm-up calls, ms; one row per case, its cells at "
          f"each B in the order of the B column (\"a / b\"). Ratios: tfdml time / peer time "
          f"(below 1: tfdml faster){', against the faster PML column' if peer and len(threads) > 1 else ''}"
          f"{'; against TF Addons and TF Similarity with tfdml graph, the same kind of step' if legacy else ''}. "
          "Forward + backward: the gradient with respect to the embeddings and the loss's own parameters "
          "(β of the margin loss, the proxies). Each row first computes the loss on the same batch on both sides: "
          f"\"same loss?\" says whether the values agree (relative {VALUE_RTOL:g}) or why they are different "
          "losses. Settings, the same on both sides:\n")
    print("\n".join(settings_lines(cases)) + "\n")
    if set(cases) & {"semi-hard triplet", "distance weighted + margin"}:
        print("PML's semi-hard miner returns *every* triplet with d(a,p) < d(a,n) < d(a,p) + margin; tfdml (as TF "
              "Addons and FaceNet) takes one negative per positive pair, the nearest beyond d(a,p), else the hardest "
              "one inside: different triplets, different work. \"PML mined\" counts what PML's miner returns in "
              "one call (tfdml: B·(m−1) slots). PML's distance weighted miner draws one negative per positive pair, "
              "as tfdml's sampler does.\n")
    if legacy:
        print("TF Addons and TF Similarity: `tf.function` (no `jit_compile`) of loss and gradient with respect to the "
              "embeddings, in their own worker (TF 2.15, Keras 2), on the same batch. TF Addons takes tfdml's triplets "
              "(semi-hard: every positive pair; batch-hard: one per anchor) and the same mean. **TF Similarity mines "
              "one positive per anchor**, the farthest, and for semi-hard the nearest negative beyond *that* "
              "positive, else the farthest negative: B triplets, not B·(m−1); batch-hard: the same triplets as the "
              "others. Neither has distance weighted sampling nor the other losses: –.\n")
    pml_columns = [f"PML, {thread_label(t)}" for t in threads] if peer else ["PML"]
    legacy_columns = list(LEGACY_PEERS) if legacy else []
    columns = pml_columns + legacy_columns
    ratios = loss_ratio_columns(legacy_columns)
    print(f"| loss + miner | B | tfdml graph | tfdml XLA | {' | '.join(columns)} | {' | '.join(ratios)} "
          "| PML mined | tfdml loss | PML loss | same loss? |")
    print("|---|" + "---:|" * (3 + len(columns) + len(ratios)) + "---:|---:|---:|---|")
    path = os.path.join(scratch, "losses.npz")
    check = None  # (B, tfdml's value, TF Addons' and TF Similarity's values) of the first semi-hard case
    not_run = []  # the legacy peers' cells left out, with the reason
    for case in cases:
        rows = []
        for batch in batches:
            ours = tfdml.ask("losses", case=case, batch=batch, per_class=per_class, dim=dim, path=path)
            contestants = {name: timed(tfdml, name=name) for name in ours["names"]}
            mined, value = "–", None
            if peer:
                try:
                    theirs = peer.ask("losses", case=case, batch=batch, per_class=per_class, path=path)
                except WorkerDied as err:  # the row without PML, the next one with a fresh worker
                    peer.restart()
                    theirs = {"missing": str(err)}
                    not_run.append(f"PML, {case}, B = {batch}: {err}")
                if "missing" not in theirs:
                    mined, value = theirs["mined"], theirs["value"]
                    for t, column in zip(threads, pml_columns):
                        contestants[column] = timed(peer, threads=t)
            if legacy:
                theirs = legacy.ask("losses", case=case, path=path)
                for name in theirs["names"]:
                    contestants[name] = timed(legacy, name=name)
                if case == "semi-hard triplet" and check is None and "TF Addons" in theirs["values"]:
                    check = (batch, ours["value"], theirs["values"])
                not_run += [f"{name}, {case}, B = {batch}: {why}" for name, why in theirs["skipped"].items()]
            median = interleaved(contestants, runs, warmup)
            cells = (loss_row_cells(median, pml_columns, legacy_columns)
                     + [str(mined), f"{ours['value']:.6g}", "–" if value is None else f"{value:.6g}",
                        same_loss_cell(case, ours, value)])
            rows.append([str(batch)] + cells)
        print(f"| {case} | {' | '.join(joined_cells(rows))} |", flush=True)
    notes = [f"- {case}: {why}." for case, why in {**DIFFERENT_LOSS, **PML_FORM}.items() if case in cases]
    if peer and notes:
        print("\nDifferent losses on the same batch (\"same loss?\"):\n\n" + "\n".join(notes))
    for line in not_run:
        print(f"\nNot run: {line}.")
    if check:
        batch, ours, values = check
        print(f"\nSame batch, same loss? Semi-hard triplet, B = {batch}, loss value: tfdml {ours:.6f}, TF Addons "
              f"{values['TF Addons']:.6f} (tfdml − TF Addons = {ours - values['TF Addons']:.1e}); TF Similarity "
              f"{values['TF Similarity']:.6f} (one positive per anchor: another loss).")
    if not legacy and any(case in LEGACY_CASES for case in cases):
        print("\nTF Addons and TF Similarity (TF ≤ 2.15, Keras 2) cannot be installed next to TF 2.21 and were "
              "not run: their last measured figures are in benchmarks/RESULTS.md (\"Peers side by side\"); "
              "make their venv with --make-legacy-venv to measure them in this run.")


def part_eval(sizes, repeat, with_pml, with_faiss):
    import bench_eval

    print("\n## Retrieval evaluation: P@1, MAP@R, R-Precision, leave-one-out (random 128-d, euclidean)\n")
    print(f"Each method in a fresh process (bench_eval.run_in_child), one after the other: a cold call, then the median "
          f"of {repeat - 1} warm calls, seconds. Ratio: tfdml warm / method warm (below 1: tfdml faster). faiss and "
          "PML search k = the largest R neighbours (PML: k=\"max_bin_count\"); PML gets one torch thread per "
          "usable core.\n")
    print("| n (classes) | method | cold s | warm s | tfdml / method | P@1 | MAP@R | R-Precision |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    methods = ["tfdml"] + (["pml"] if with_pml else []) + (["faiss"] if with_faiss else [])
    for n in sizes:
        rows = {}
        for method in methods:
            try:
                rows[method] = bench_eval.run_in_child(method, n, repeat=repeat, ks=(1,))
            except RuntimeError as err:
                print(f"| {n:,} | {EVAL_METHODS[method]} | failed: {err} | | | | | |")
        ours = rows.get("tfdml", {}).get("warm_s")
        for method, row in rows.items():
            m = row["metrics"]
            print(f"| {n:,} ({row['classes']:,}) | {EVAL_METHODS[method]} | {row['wall_s']:.2f} | "
                  f"{cell(row['warm_s'], 1, 2)} | {'' if method == 'tfdml' else ratio(ours, row['warm_s'])} | "
                  f"{m['recall@1']:.5f} | {m['map@r']:.5f} | {m['r_precision']:.5f} |", flush=True)
        values = [[r["metrics"][k] for k in ("recall@1", "map@r", "r_precision")] for r in rows.values()]
        spread = max((abs(a - b) for v in values for w in values for a, b in zip(v, w)), default=0.0)
        print(f"\nn = {n:,}: largest difference of a metric between methods: {spread:.1e}\n")


def part_fit(tfdml, peer, batch, modes, rounds, warmup, steps, threads, scratch, per_class=4, network_only=False):
    if network_only:
        print("\n## Training step of the network alone (mean squared error to fixed targets, Adam, 32×32×1)\n")
        sides_are = ("tfdml: a plain Keras model.fit of the same network (bench_fit_step.time_network); torch: "
                     "eager PyTorch, the same loss")
    else:
        print("\n## Training step (margin + distance weighted, Adam, 32×32×1, m = 4)\n")
        sides_are = ("tfdml: EmbeddingModel.fit (bench_fit_step.time_mode); torch: eager PyTorch, PML "
                     "MarginLoss(learn_beta, per class) + DistanceWeightedMiner")
    sides = list(modes) + ([f"torch, {thread_label(t)}" for t in threads] if peer else [])
    print(f"4 × [conv 3×3 – BN – ReLU – max-pool] 32-64-128-256, global average pool, Dense 128, L2; B = {batch}. "
          f"{rounds} rounds, each a fresh model per side in turn ({' → '.join(sides)}), {warmup} warm-up + "
          f"{steps} timed steps; median step time over all timed steps. {sides_are}. Ratio: tfdml step time / "
          "torch step time (below 1: tfdml faster; goal 4 asks "
          f"for ≤ 1){', against the faster torch row' if peer and len(threads) > 1 else ''}.\n")
    path = os.path.join(scratch, "fit.npz")
    tfdml.ask("fit_batch", batch=batch, per_class=per_class, path=path)
    times = {side: [] for side in sides}
    for _ in range(rounds):
        for mode in modes:
            times[mode] += tfdml.ask("fit", mode=mode, batch=batch, warmup=warmup, steps=steps,
                                     network_only=network_only)["times"]
        if peer:
            for t in threads:
                times[f"torch, {thread_label(t)}"] += peer.ask("fit", batch=batch, per_class=per_class, warmup=warmup,
                                                            steps=steps, threads=t, path=path,
                                                            network_only=network_only)["times"]
    median = {side: statistics.median(t) for side, t in times.items()}
    theirs = min((m for side, m in median.items() if side.startswith("torch")), default=None)
    print("| side | median step ms | steps/s | tfdml / torch |")
    print("|---|---:|---:|---:|")
    for side, m in median.items():
        name = f"PyTorch + PML, {side[len('torch, '):]}" if side.startswith("torch") else f"tfdml, {side}"
        print(f"| {name} | {1000 * m:.1f} | {1 / m:.1f} | {'' if side.startswith('torch') else ratio(m, theirs)} |",
              flush=True)


def arguments(argv=None):
    """The parsed command line (``argv``; None: ``sys.argv[1:]``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", default=["losses", "eval", "fit"],
                        choices=["losses", "eval", "fit", "memory"])
    parser.add_argument("--batch", type=int, nargs="+", default=[256, 1024], help="B of the losses part")
    parser.add_argument("--cases", nargs="+", default=list(LOSS_CASES), choices=LOSS_CASES, metavar="CASE",
                        help="loss + miner cases of the losses part")
    parser.add_argument("--per-class", type=int, default=4)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--runs", type=int, default=11, help="interleaved rounds of the losses part")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000], help="n of the eval part")
    parser.add_argument("--large", action="store_true", help="add n = 60,000 to the eval part")
    parser.add_argument("--repeat", type=int, default=3, help="calls per eval process (the first is cold)")
    parser.add_argument("--fit-batch", type=int, default=128)
    parser.add_argument("--fit-modes", nargs="+", default=["graph", "xla", "loss"],
                        help="modes of bench_fit_step.py (graph, xla, loss; ':mixed_bfloat16' after one "
                             "computes the network in bfloat16)")
    parser.add_argument("--fit-rounds", type=int, default=3)
    parser.add_argument("--fit-warmup", type=int, default=5)
    parser.add_argument("--fit-steps", type=int, default=30)
    parser.add_argument("--fit-network-only", action="store_true",
                        help="fit part: the network alone on both sides (a squared error to fixed targets, no "
                             "metric loss), to split a step's time between the network and the loss")
    parser.add_argument("--memory-sizes", type=int, nargs="+", default=list(peers_memory.MEMORY_SIZES),
                        metavar="K", help="memory sizes (tfdml's rows) of the memory part")
    parser.add_argument("--memory-cases", nargs="+", default=list(peers_memory.MEMORY_CASES),
                        choices=peers_memory.MEMORY_CASES, metavar="CASE", help="loss cases of the memory part")
    parser.add_argument("--memory-batch", type=int, default=256, help="B of the memory part")
    parser.add_argument("--threads", type=int, nargs="+", default=[usable_cores()],
                        help="torch.set_num_threads for PyTorch's side (several: one column each)")
    parser.add_argument("--legacy-python", metavar="PATH", default=default_legacy_python(),
                        help="interpreter with TF 2.15, tensorflow-addons and tensorflow-similarity for the losses "
                             f"part (default: {venv_python(LEGACY_VENV)} if it exists)")
    parser.add_argument("--make-legacy-venv", metavar="DIR", nargs="?", const=LEGACY_VENV,
                        help=f"make that venv in DIR (default {LEGACY_VENV}) with --venv-python and pip: "
                             f"{' '.join(LEGACY_PINS)}; then exit")
    parser.add_argument("--venv-python", default="python3.11", metavar="PYTHON",
                        help="Python 3.9–3.11 that --make-legacy-venv makes the venv with (default python3.11)")
    parser.add_argument("--worker", choices=["tfdml", "torch", "legacy"], help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None):
    args = arguments(argv)
    if args.worker:
        serve(args.worker)
        return 0
    if args.make_legacy_venv:
        python = make_legacy_venv(args.make_legacy_venv, args.venv_python)
        how = "by default" if python == venv_python(LEGACY_VENV) else f"with --legacy-python {python}"
        print(f"Made {python}: the losses part uses it {how}.")
        return 0

    print(f"Load average at the start: {load_average()}")
    have_torch = report_missing(("torch", "pytorch_metric_learning"), "PyTorch + pytorch-metric-learning")
    have_faiss = report_missing(("faiss",), "faiss + NumPy")
    tfdml = peer = legacy = None
    try:
        tfdml = Worker("tfdml")
        peer = Worker("torch") if have_torch and {"losses", "fit", "memory"} & set(args.parts) else None
        legacy, legacy_info = (legacy_worker(args.legacy_python) if "losses" in args.parts else None) or (None, None)
        info = tfdml.ask("info")
        print(f"Machine: {info['machine']}")
        versions = [f"TensorFlow intra-op threads {info['threads']}"]
        if have_torch:
            versions += [f"PyTorch {version('torch')} (torch.set_num_threads: {', '.join(map(str, args.threads))})",
                         f"pytorch-metric-learning {version('pytorch-metric-learning')}"]
        if have_faiss:
            versions.append(f"faiss-cpu {version('faiss-cpu')}")
        if legacy:
            v = legacy_info["versions"]
            versions.append(f"TF Addons {v['TF Addons']} and TF Similarity {v['TF Similarity']} on TensorFlow "
                            f"{v['TensorFlow']} (intra-op threads {legacy_info['threads']}; {args.legacy_python})")
        print(f"Side by side: {'; '.join(versions)}. TensorFlow and PyTorch run in separate worker processes"
              f"{', TF 2.15 in a third' if legacy else ''}.")
        with tempfile.TemporaryDirectory() as scratch:
            if "losses" in args.parts:
                part_losses(tfdml, peer, args.batch, args.runs, args.warmup, args.per_class, args.dim,
                            args.threads, scratch, args.cases, legacy)
            if "eval" in args.parts:
                sizes = list(args.sizes) + ([60_000] if args.large and 60_000 not in args.sizes else [])
                part_eval(sizes, max(2, args.repeat), have_torch and have_faiss, have_faiss)
                if have_torch and not have_faiss:
                    print("PML's AccuracyCalculator skipped: it searches with faiss, which is not installed.")
            if "fit" in args.parts:
                part_fit(tfdml, peer, args.fit_batch, args.fit_modes, args.fit_rounds, args.fit_warmup,
                         args.fit_steps, args.threads, scratch, network_only=args.fit_network_only)
            if "memory" in args.parts:
                shared = types.SimpleNamespace(  # what the memory part shares with the others
                    interleaved=interleaved, timed=timed, ratio=ratio, cell=cell, thread_label=thread_label,
                    settings_lines=settings_lines, same_loss_cell=same_loss_cell, VALUE_RTOL=VALUE_RTOL)
                peers_memory.part_memory(shared, tfdml, peer, args.memory_sizes, args.memory_cases,
                                         args.memory_batch, args.per_class, args.dim, args.runs, args.warmup,
                                         args.threads, scratch)
    finally:
        for worker in (tfdml, peer, legacy):
            if worker:
                worker.close()
    print(f"\nLoad average at the end: {load_average()}")
    return 0


if __name__ == "__main__":
    import results_tables  # benchmarks/results_tables.py: --record writes this run's tables

    sys.exit(results_tables.run(main, "compare_peers"))
