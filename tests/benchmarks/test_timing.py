"""benchmarks/timing.py: the shared timer calls its functions round-robin, after their
warm-up calls, and waits for every output. No time is asserted."""

import importlib.util
import os

import numpy as np
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("timing", os.path.join(ROOT, "benchmarks", "timing.py"))
timing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timing)


def test_calls_are_interleaved_after_each_functions_warmup():
    calls = []

    def make(name):
        def fn(x, y):
            calls.append(name)
            return {"sum": tf.constant(x + y), "rest": [np.float32(1.0)]}
        return fn

    medians = timing.interleaved_ms([make("a"), make("b")], (1, 2), runs=3, warmup=2)
    assert calls == ["a", "a", "b", "b"] + ["a", "b"] * 3
    assert len(medians) == 2 and all(m >= 0 for m in medians)


def test_every_tensor_of_a_nested_output_is_copied_to_the_host():
    out = timing.materialise({"a": tf.ones([2]), "b": (tf.zeros([1]), 3)})
    assert isinstance(out["a"], np.ndarray) and isinstance(out["b"][0], np.ndarray)
    assert out["b"][1] == 3
