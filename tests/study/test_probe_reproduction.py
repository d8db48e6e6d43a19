"""study/probe_reproduction.py: a larger view only adds distractors, and finished runs'
models are re-scored with the claim's checks (tiny stand-in models, no training)."""

import importlib.util
import json
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "study", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


probe = _load("probe_reproduction")
rp = probe.reproduce


def test_a_larger_view_keeps_the_smaller_views_classes(kanji_dir, tmp_path):
    small = rp.make_view(kanji_dir, str(tmp_path), train_classes=None, test_classes=3)
    large = rp.make_view(kanji_dir, str(tmp_path), train_classes=None, test_classes=6)
    with np.load(small) as a, np.load(large) as b:
        assert set(a["labels"][a["test"]]) < set(b["labels"][b["test"]])
        np.testing.assert_array_equal(a["labels"][~a["test"]], b["labels"][~b["test"]])


def _stand_in_model(path, seed):
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((32, 32)), keras.layers.Rescaling(1 / 255), keras.layers.Flatten(),
                              keras.layers.Dense(8), keras.layers.UnitNormalization()])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    model.save(path)


def test_probe_rescores_every_run_with_a_model_and_applies_the_checks(kanji_dir, tmp_path, capsys):
    out = tmp_path / "out"
    arms = rp.claim_arms("lu_topk")
    for i, arm in enumerate(arms):
        for seed in (0, 1):
            folder = out / "arms" / arm
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"seed-{seed}.json").write_text(json.dumps({"arm": arm, "seed": seed, "metrics": {},
                                                                  "finished": f"2026-01-0{seed + 1}T0{i}:00"}))
            if not (i == len(arms) - 1 and seed == 1):  # one run trained elsewhere: no model here
                _stand_in_model(str(folder / f"seed-{seed}" / "model.keras"), 10 * i + seed)
    budget = {"train_classes": None, "test_classes": 3}
    scores, missing, runs = probe.probe("lu_topk", str(out), kanji_dir, budget, test_classes=6, ks=[1, 2])
    assert missing == [f"{arms[-1]} seed 1"]
    # each score is tied to the result it came from (what tells a stale probe)
    assert runs == {arm: {s: f"2026-01-0{int(s) + 1}T0{i}:00" for s in scores[arm]} for i, arm in enumerate(arms)}
    assert sorted(scores) == sorted(arms) and set(scores[arms[0]]) == {"0", "1"}
    for seeds in scores.values():
        for values in seeds.values():
            assert list(values) == ["recall@1", "precision@1", "precision@2", "map@r"]
            assert all(0.0 <= v <= 1.0 for v in values.values())
    text = probe.table("lu_topk", scores, [1, 2])
    # the checks of the claims lu_topk tests, judged by the verdict function (paired by seed, Holm)
    row = rp.paper_claims.rows_of("lu_topk")[0]
    judged, _ = rp.verdicts.judge([{"better": {int(s): v["map@r"] for s, v in scores[b].items()},
                                    "worse": {int(s): v["map@r"] for s, v in scores[w].items()}}
                                   for b, w in row["checks"]])
    better, worse = row["checks"][0]
    line = next(line for line in text.splitlines() if line.startswith(f"| {row['id']}: {better} > {worse}"))
    cell = line.strip(" |").split(" | ")[-1]
    assert cell.startswith(f"{100 * judged[0]['diff']:+.1f}") and cell.endswith(judged[0]["outcome"])


def test_probe_refuses_a_view_no_harder_than_the_budgets(capsys):
    with pytest.raises(SystemExit):
        probe.main(["--claim", "lu_topk", "--test-classes", str(rp.BUDGETS["standard"]["test_classes"])])
    assert "must exceed" in capsys.readouterr().err
