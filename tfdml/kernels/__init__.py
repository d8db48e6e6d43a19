"""Kernels: the one place where a fast form of a computation is chosen over its plain path.

Every sampler and metric has a **plain reference path**: short, readable in one
screen, written from the paper's rule, and the definition of what the computation
returns. Some computations also have **fast forms** (a sorting network where a
compiler's sort is slow, a blocked matmul for a running count, a comparison path
for small classes, ...). A fast form has the same signature and returns the same
values as its reference path (tests check this on random and adversarial inputs,
in graph mode and under XLA); it only runs faster on some device and mode.

Which form runs is decided here and nowhere else, by :data:`CHOICES`: a table keyed
by device kind, then kernel name, then mode (``"graph"`` or ``"xla"``). An entry
holds the name of the fast form and, where it has them, its tuned parameters and the
CPU instruction-set flags it needs (a CPU without them runs the reference). A
kernel, device kind or mode without an entry runs :data:`REFERENCE`: a device
is measured before it gets a fast form (the CPU entries are the forms measured
faster on CPU, benchmarks/RESULTS.md).

Code asks :func:`choose` at trace time::

    choice = kernels.choose("ordering")
    if choice.form == "bitonic": ...

and nothing reads :data:`CHOICES` itself. The reference paths of the row primitives
and score helpers are plain TensorFlow in :mod:`tfdml.primitives`, below this
package, and never ask the table; :mod:`tfdml.kernels.chosen` runs each of them in
the form :func:`choose` answers. The kernels import :mod:`tfdml.primitives`,
:mod:`tfdml.xla` and each other, never the samplers, metrics, losses or models
built on them (``tests/test_imports.py``).

:func:`forced` makes every :func:`choose` in its scope answer one form (the
reference path, for tests and for comparing forms).
"""

import contextlib
import dataclasses
import functools
import threading

REFERENCE = "reference"
MODES = ("graph", "xla")
DEVICE_KINDS = ("CPU", "GPU", "TPU")


@dataclasses.dataclass(frozen=True)
class Choice:
    """A form of a kernel: its name, its tuned parameters (a dict, possibly empty) and the
    CPU instruction-set flags it needs (``requires``, as Linux names them in
    ``/proc/cpuinfo``): on a CPU without every one of them, :func:`choose` answers the
    reference path."""

    form: str = REFERENCE
    params: dict = dataclasses.field(default_factory=dict)
    requires: tuple = ()

    @property
    def is_reference(self):
        return self.form == REFERENCE

    def __hash__(self):
        return hash((self.form, tuple(sorted(self.params.items())), self.requires))


#: device kind -> kernel name -> mode -> Choice. Missing entries mean REFERENCE.
CHOICES = {
    "CPU": {},
    "GPU": {},
    "TPU": {},
}

# --- retrieval metrics (tfdml.metrics.retrieval; forms in kernels/counting.py, kernels/retrieval.py) ---
CHOICES["CPU"].update({
    # Counts of values >= each threshold: under XLA one variadic reduction per `group`
    # thresholds (wider ones compile for longer and run no faster); graph mode: the reference.
    "count_at_least": {"xla": Choice("variadic_reduce", {"group": 64})},
    # A chunk of queries' counts, chosen once per evaluation on the host (so the same in
    # both modes): counted under XLA up to `max_positives` positives per query, or up to
    # `max_positives_large` from `large_from_pairs` query-gallery pairs on; else sorted.
    "positive_counts": {mode: Choice("count_or_sort", {"max_positives": 64, "max_positives_large": 256,
                                                       "large_from_pairs": 2**25})
                        for mode in MODES},
})

# --- samplers ------------------------------------------------------------------------
# The forms measured faster on CPU (benchmarks/RESULTS.md: "Semi-hard sampler", "Row
# order", "First call"), in the mode each is chosen for today. The forms themselves:
# tfdml/kernels/argmin.py, binary_search.py, running_count.py, sorting.py, semi_hard.py,
# top_k.py, distance_weighted.py, triplet_slots.py.
_LISTED_PER_ANCHOR = 16  # valid slots listed per anchor under XLA: m-per-class batches with m <= 17
CHOICES["CPU"].update({
    # primitives.first_argmin / first_argmax: TensorFlow's one-pass arg-min kernel in
    # graph mode; under XLA the reference's two fused reductions.
    "first_argmin": {"graph": Choice("one_pass")},
    # primitives.count_less_equal (binary lifting): its steps written out where N is
    # static in graph mode; under XLA the reference's loop (one step body to compile).
    "count_less_equal": {"graph": Choice("unrolled")},
    # primitives.running_count: a triangular matmul per block of columns.
    "running_count": {mode: Choice("blocked_matmul", {"block": 64}) for mode in MODES},
    # primitives.stable_order (keys of at most 32 bits): one int64 per entry holding
    # the key's bits and its tie rank, sorted by TensorFlow's sort / a bitonic network.
    "ordering": {"graph": Choice("packed_sort"), "xla": Choice("bitonic")},
    # samplers.SemiHardSampler: per class compare path (K positives per step, K from
    # widths) while the largest class has at most sort_above + 1 members, else the sort path.
    # Under XLA one width: every branch of the switch is compiled, whichever runs.
    "semi_hard": {
        "graph": Choice("compare_or_sort", {"widths": (1, 2, 3, 4), "sort_above": 40}),
        "xla": Choice("compare_or_sort", {"widths": (4,), "sort_above": 64}),
    },
    # samplers.TopKMisplacedSampler: k passes per ranking instead of a sort, for k <= up_to.
    "top_k": {mode: Choice("prefix", {"up_to": 16}) for mode in MODES},
    # samplers.DistanceWeightedSampler: the draw searches only the valid slots, compacted
    # (graph mode: a shape known at run time) or listed `width` per anchor (XLA).
    "distance_weighted": {"graph": Choice("valid_slots"), "xla": Choice("listed_slots", {"width": _LISTED_PER_ANCHOR})},
    # losses.MetricLoss's triplet losses: on the valid slots alone (graph mode, a shape known
    # at run time; MetricLoss.sample) or on `width` listed per anchor (XLA; over_triplets).
    "triplet_slots": {"graph": Choice("valid_slots"), "xla": Choice("listed_slots", {"width": _LISTED_PER_ANCHOR})},
})
# --- end samplers --------------------------------------------------------------------

# --- precision (tfdml.kernels.chosen.dtype_policy; the forms are Keras dtype policies) ---
CHOICES["CPU"].update({
    # The encoder's dtype policy under model.dtype_policy "auto": bfloat16 compute where the
    # CPU has bfloat16 instructions and TensorFlow's own kernels run the encoder (graph mode,
    # jit_compile "loss"); a whole step compiled by XLA, or a CPU without them, stays float32.
    "dtype_policy": {"graph": Choice("mixed_bfloat16", requires=("avx512_bf16",))},
})

_forced = threading.local()


def device_kind():
    """The kind of device the ops being built run on: "GPU" when TensorFlow sees a GPU
    (Keras and ``tf.function`` place compute there), "TPU" under a TPU strategy,
    else "CPU"."""
    import tensorflow as tf

    try:
        strategy = tf.distribute.get_strategy()
        if "TPU" in type(strategy).__name__:
            return "TPU"
    except (AttributeError, ValueError):  # pragma: no cover - outside any strategy scope
        pass
    return "GPU" if tf.config.list_logical_devices("GPU") else "CPU"


def read_cpu_features(path="/proc/cpuinfo"):
    """The instruction-set flags of the first processor listed in ``path`` (Linux's
    ``/proc/cpuinfo``: its ``flags`` line on x86, ``Features`` on ARM), e.g. ``"avx2"``,
    ``"avx512_bf16"``; empty when the file is not there or not readable (another OS)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


@functools.lru_cache(maxsize=None)
def cpu_features():
    """This machine's CPU flags (:func:`read_cpu_features`), read once: a :class:`Choice`
    with ``requires`` is chosen only where all of them are here."""
    return read_cpu_features()


def current_mode():
    """``"xla"`` while tracing for XLA (:func:`tfdml.xla.is_compiling`), else ``"graph"``
    (graph mode and eager execution run the same TensorFlow kernels)."""
    from tfdml import xla

    return "xla" if xla.is_compiling() else "graph"


def choose(kernel, mode=None, device=None):
    """The :class:`Choice` for ``kernel`` on ``device`` (default :func:`device_kind`) in
    ``mode`` (default :func:`current_mode`); the reference path when the table has no
    entry, and whatever :func:`forced` says inside its scope."""
    forced_form = getattr(_forced, "form", None)
    only = getattr(_forced, "kernels", None)
    if forced_form is not None and (only is None or kernel in only):
        return Choice(forced_form) if forced_form == REFERENCE else _forced_choice(kernel, mode, device, forced_form)
    mode = mode or current_mode()
    if mode not in MODES:
        raise ValueError(f"Unknown kernel mode {mode!r}; use one of {MODES}.")
    device = device or device_kind()
    choice = CHOICES.get(device, {}).get(kernel, {}).get(mode, Choice())
    if choice.requires and not set(choice.requires) <= cpu_features():
        return Choice()
    return choice


def _forced_choice(kernel, mode, device, form):
    """A forced fast form keeps the parameters the table gives it anywhere (so a test can
    run the CPU form on any machine)."""
    for by_kernel in CHOICES.values():
        for by_mode in by_kernel.get(kernel, {}).values():
            if by_mode.form == form:
                return by_mode
    return Choice(form)


def kernel_names():
    """The kernels the table has an entry for, on any device."""
    return sorted({kernel for by_kernel in CHOICES.values() for kernel in by_kernel})


def check_kernel_names(names):
    """``names`` as a frozenset; ValueError naming the first unknown one and the table's kernels."""
    names = frozenset(names)
    unknown = sorted(names - set(kernel_names()))
    if unknown:
        raise ValueError(f"Unknown kernel {unknown[0]!r}; the table's kernels: {', '.join(kernel_names())}.")
    return names


@contextlib.contextmanager
def forced(form=REFERENCE, kernels=None):
    """Within this scope every :func:`choose` answers ``form`` (default: the reference
    path), or only the ``choose`` of the named ``kernels`` (the others answer from the
    table). Affects only what is traced inside the scope."""
    if kernels is not None:
        kernels = check_kernel_names(kernels)
    previous = getattr(_forced, "form", None), getattr(_forced, "kernels", None)
    _forced.form, _forced.kernels = form, kernels
    try:
        yield
    finally:
        _forced.form, _forced.kernels = previous


def table():
    """The table as rows ``(device, kernel, mode, form, params)``, for docs and benchmarks."""
    return [(device, kernel, mode, choice.form, dict(choice.params))
            for device, by_kernel in sorted(CHOICES.items())
            for kernel, by_mode in sorted(by_kernel.items())
            for mode, choice in sorted(by_mode.items())]

