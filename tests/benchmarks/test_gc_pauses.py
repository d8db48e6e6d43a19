"""benchmarks/gc_pauses.py: collections counted and timed per generation, long ones named with
their test (a scripted clock: nothing depends on this machine's speed)."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("gc_pauses", os.path.join(ROOT, "benchmarks", "gc_pauses.py"))
gc_pauses = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gc_pauses)


def test_collections_are_timed_per_generation_and_long_ones_named():
    ticks = iter([0.0, 0.5, 1.0, 4.0, 10.0, 10.5])
    recorder = gc_pauses.Recorder(clock=lambda: next(ticks))
    recorder.test = "tests/a.py::test_one"
    for generation in (0, 2):
        recorder.callback("start", {"generation": generation})
        recorder.callback("stop", {"generation": generation})
    recorder.test = "tests/a.py::test_two"
    recorder.callback("start", {"generation": 2})
    recorder.callback("stop", {"generation": 2})
    assert recorder.counts == [1, 0, 2]
    assert recorder.seconds == [0.5, 0.0, 3.5]
    assert recorder.long == [(3.0, 2, "tests/a.py::test_one")]
    report = recorder.report().splitlines()
    assert report[0].endswith("generation 0: 1 collections, 0.5 s, generation 1: 0 collections, 0.0 s, "
                              "generation 2: 2 collections, 3.5 s")
    assert report[1:] == ["  3.0 s, generation 2, during tests/a.py::test_one"]


def test_stacks_are_dumped_only_while_a_full_collection_runs(monkeypatch, tmp_path):
    armed = []
    monkeypatch.setattr(gc_pauses.faulthandler, "dump_traceback_later",
                        lambda seconds, repeat, file: armed.append(("arm", seconds, repeat, file)))
    monkeypatch.setattr(gc_pauses.faulthandler, "cancel_dump_traceback_later", lambda: armed.append("cancel"))
    ticks = iter([0.0, 0.1, 1.0, 5.0])
    with open(tmp_path / "stacks.txt", "w") as stacks:
        recorder = gc_pauses.Recorder(clock=lambda: next(ticks), stacks_every=2.0, stacks_file=stacks)
        recorder.test = "tests/a.py::test_one"
        recorder.callback("start", {"generation": 1})
        recorder.callback("stop", {"generation": 1})
        assert armed == []
        recorder.callback("start", {"generation": 2})
        assert armed == [("arm", 2.0, True, stacks)]
        recorder.callback("stop", {"generation": 2})
        assert armed[1:] == ["cancel"]
    assert (tmp_path / "stacks.txt").read_text() == "--- full collection during tests/a.py::test_one\n"
    assert recorder.long == [(4.0, 2, "tests/a.py::test_one")]
