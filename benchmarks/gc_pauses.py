"""A pytest plugin timing Python's cyclic garbage collector in every test process.

    GC_PAUSES_DIR=/tmp/gc PYTHONPATH=benchmarks TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python -m pytest -p gc_pauses

Each process (each xdist worker) writes, when it ends, the collections of each generation and
their total seconds, and every collection longer than ``LONG`` seconds with the test that was
running: to ``GC_PAUSES_DIR/gc-pauses-<pid>.txt`` (xdist does not pass its workers' stderr on),
or to stderr without ``GC_PAUSES_DIR``. Wall time: a pause includes the finalizers the
collection runs.

``GC_PAUSES_STACKS=S`` (with ``GC_PAUSES_DIR``) also dumps every thread's Python stack every S
seconds while a full collection runs (``faulthandler.dump_traceback_later``), into
``GC_PAUSES_DIR/gc-stacks-<pid>.txt``: a ``__del__`` on top of the stack is a Python
finalizer that makes the pause; the allocating code alone on top, the pause is native.
"""

import faulthandler
import gc
import os
import sys
import time

LONG = 1.0


class Recorder:
    """Times collections through ``gc.callbacks`` (:meth:`callback`)."""

    def __init__(self, clock=time.perf_counter, stacks_every=None, stacks_file=None):
        self.clock = clock
        self.stacks_every = stacks_every  # seconds between stack dumps in a full collection
        self.stacks_file = stacks_file
        self.counts = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.long = []  # (seconds, generation, test)
        self.test = None
        self._started = None

    def callback(self, phase, info):
        generation = info["generation"]
        dumps = self.stacks_every is not None and generation == 2
        if phase == "start":
            self._started = self.clock()
            if dumps:
                self.stacks_file.write(f"--- full collection during {self.test}\n")
                self.stacks_file.flush()
                faulthandler.dump_traceback_later(self.stacks_every, repeat=True, file=self.stacks_file)
            return
        if dumps:
            faulthandler.cancel_dump_traceback_later()
        elapsed = self.clock() - self._started
        self.counts[generation] += 1
        self.seconds[generation] += elapsed
        if elapsed > LONG:
            self.long.append((elapsed, generation, self.test))

    def report(self):
        lines = [f"gc in process {os.getpid()}: "
                 + ", ".join(f"generation {g}: {n} collections, {s:.1f} s"
                             for g, (n, s) in enumerate(zip(self.counts, self.seconds)))]
        lines += [f"  {s:.1f} s, generation {g}, during {test}" for s, g, test in sorted(self.long, reverse=True)]
        return "\n".join(lines)


_recorder = Recorder()


def pytest_configure(config):
    folder, every = os.environ.get("GC_PAUSES_DIR"), os.environ.get("GC_PAUSES_STACKS")
    if folder and every:
        os.makedirs(folder, exist_ok=True)
        _recorder.stacks_every = float(every)
        _recorder.stacks_file = open(os.path.join(folder, f"gc-stacks-{os.getpid()}.txt"), "w")
    gc.callbacks.append(_recorder.callback)


def pytest_runtest_setup(item):
    _recorder.test = item.nodeid


def pytest_unconfigure(config):
    folder = os.environ.get("GC_PAUSES_DIR")
    if not folder:
        print(_recorder.report(), file=sys.__stderr__)
        return
    from tfdml import files

    os.makedirs(folder, exist_ok=True)
    files.write_text(os.path.join(folder, f"gc-pauses-{os.getpid()}.txt"), _recorder.report() + "\n")
