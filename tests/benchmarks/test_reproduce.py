"""benchmarks/reproduce.py: every arm is a valid config, the verdict rule, and one
real (tiny) arm run through train.py, resumed and refused when its config changes."""

import importlib.util
import json
import os

import numpy as np
import pytest

from tfdml_app import config as tfdml_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("reproduce", os.path.join(ROOT, "benchmarks", "reproduce.py"))
rp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rp)


def test_every_arm_of_every_claim_is_a_valid_config(tmp_path):
    budget = rp.BUDGETS["standard"]
    arms = {arm for claim in rp.CLAIMS for arm in rp.claim_arms(claim)}
    assert arms <= set(rp.ARMS), f"claims name arms that do not exist: {sorted(arms - set(rp.ARMS))}"
    for arm in sorted(arms):
        cfg = rp.arm_config(arm, 0, str(tmp_path / "view.npz"), budget, str(tmp_path / arm))
        tfdml_config.validate(cfg)  # raises ConfigError naming the key
        factor = rp.ARMS[arm].get(rp.STEPS_KEY, 1)  # the budget probes train longer on purpose
        assert cfg["training"]["epochs"] * cfg["training"]["steps_per_epoch"] == budget["steps"] * factor


def test_arms_differ_only_in_what_the_claim_compares(tmp_path):
    cfg = lambda arm: rp.arm_config(arm, 0, "v.npz", rp.BUDGETS["standard"], "out")  # noqa: E731
    a, b = cfg("margin-dw-b80"), cfg("margin-semi_hard-b80")
    assert a["loss"]["sampler"] == "distance_weighted" and b["loss"]["sampler"] == "semi_hard"
    a["loss"].pop("sampler"), b["loss"].pop("sampler")
    assert a == b
    assert cfg("margin-dw-b40")["design"] == {"name": "m_per_class", "m": 5, "n": 8}
    assert cfg("margin-dw-b80-fixed1.0")["loss"]["options"]["learn_beta0"] is False
    wide, narrow = cfg("balanced-prandom0.9-pairs256-is"), cfg("balanced-prandom0.9-is")
    assert (wide["design"].pop("pairs"), narrow["design"].pop("pairs")) == (256, 64)
    assert wide == narrow
    low, hong = cfg("balanced-group2x32-is-lam16"), cfg("balanced-group2x32-is")
    assert (low["loss"]["options"].pop("lam"), hong["loss"]["options"].pop("lam")) == (16.0, 256.0)
    assert low == hong
    longer, plain = cfg("margin-dw-b80-x4"), cfg("margin-dw-b80")
    assert (longer["training"].pop("steps_per_epoch"), plain["training"].pop("steps_per_epoch")) == (1000, 250)
    assert longer == plain and rp.STEPS_KEY not in longer  # 8 evaluations each, nothing else differs
    quick = rp.arm_config("margin-dw-b80-x4", 0, "v.npz", rp.BUDGETS["quick"], "out")["training"]
    assert quick["epochs"] * quick["steps_per_epoch"] == 4 * rp.BUDGETS["quick"]["steps"]
    fig2, plain = cfg("balanced-group4x16-is-fig2"), cfg("balanced-group4x16-is")
    assert fig2["evaluation"].pop("objective_sample") == rp.OBJECTIVE_SAMPLE and fig2 == plain
    assert rp.config_key(cfg("margin-dw-b80")) != rp.config_key(rp.arm_config("margin-dw-b80", 1, "v.npz",
                                                                             rp.BUDGETS["standard"], "out"))
    # A results folder moved to another checkout keeps its results: folders do not count, names do.
    moved = rp.arm_config("margin-dw-b80", 0, "/elsewhere/v.npz", rp.BUDGETS["standard"], "/elsewhere/out")
    assert rp.config_key(moved) == rp.config_key(cfg("margin-dw-b80"))
    other_view = rp.arm_config("margin-dw-b80", 0, "w.npz", rp.BUDGETS["standard"], "out")
    assert rp.config_key(other_view) != rp.config_key(cfg("margin-dw-b80"))


@pytest.mark.parametrize("better, worse, at_least, outcome", [
    ([0.60, 0.62, 0.61], [0.50, 0.52, 0.51], False, "holds"),
    ([0.50, 0.52, 0.51], [0.60, 0.62, 0.61], False, "reversed"),
    ([0.50, 0.60, 0.55], [0.52, 0.58, 0.50], False, "unresolved"),
    ([0.50, 0.60, 0.55], [0.52, 0.58, 0.50], True, "holds (not worse)"),
    ([0.6], [0.5], False, "too few seeds"),
    ([], [0.5, 0.4], False, "missing"),
])
def test_check_outcome_follows_the_two_standard_error_rule(better, worse, at_least, outcome):
    diff, se, got = rp.check_outcome(better, worse, at_least)
    assert got == outcome
    if se is not None:
        # by hand: SE = sqrt(s_b²/n_b + s_w²/n_w) with the sample std
        expected = np.sqrt(np.var(better, ddof=1) / len(better) + np.var(worse, ddof=1) / len(worse))
        assert se == pytest.approx(expected)
        assert diff == pytest.approx(np.mean(better) - np.mean(worse))


def test_claim_verdicts():
    assert rp.claim_verdict(["holds", "holds (not worse)"]) == "reproduced"
    assert rp.claim_verdict(["holds", "unresolved"]) == "partly reproduced"
    assert rp.claim_verdict(["reversed", "unresolved"]) == "not reproduced"
    assert rp.claim_verdict(["holds", "missing"]).startswith("no verdict")


def test_view_keeps_a_fixed_sample_of_test_classes(kanji_dir, tmp_path):
    path = rp.make_view(kanji_dir, str(tmp_path), train_classes=4, test_classes=3)
    with np.load(path) as view:
        labels, test = view["labels"], view["test"]
        assert len(np.unique(labels[test])) == 3 and len(np.unique(labels[~test])) == 4
        assert set(labels[test]) <= set(range(0x4E00 + 24, 0x4E00 + 30))
    again = rp.make_view(kanji_dir, str(tmp_path / "other"), train_classes=4, test_classes=3)
    with np.load(again) as other:
        np.testing.assert_array_equal(other["labels"], labels)


def test_imbalanced_view_subsamples_training_classes_only(kanji_dir, tmp_path):
    plain = rp.make_view(kanji_dir, str(tmp_path), train_classes=None, test_classes=6)
    skewed = rp.make_view(kanji_dir, str(tmp_path), train_classes=None, test_classes=6, imbalance=0.9)
    assert plain != skewed
    with np.load(plain) as a, np.load(skewed) as b:
        sizes = lambda v, t: np.unique(v["labels"][v["test"] == t], return_counts=True)[1]  # noqa: E731
        np.testing.assert_array_equal(sizes(a, True), sizes(b, True))  # the test split is untouched
        kept = sizes(b, False)
        assert kept.min() >= 4 and kept.sum() < sizes(a, False).sum() and len(set(kept)) > 1
    arm = "balanced-group4x16-imbalance0.9-is"
    assert rp.view_of(arm, kanji_dir, str(tmp_path), {"train_classes": None, "test_classes": 6}) == skewed
    assert rp.VIEW_KEY not in rp.arm_config(arm, 0, skewed, rp.BUDGETS["quick"], "out")


def test_an_arm_runs_through_train_py_and_is_not_run_twice(kanji_dir, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--claim", "wu_beta", "--seeds", "0", "--data", kanji_dir, "--out", str(out),
            "--steps", "2", "--train-classes", "20", "--test-classes", "4"]
    # one arm of the claim only: the others are left missing, and the report says so
    only = {"margin-dw-b80"}
    original = rp.claim_arms
    rp.claim_arms = lambda claim: [a for a in original(claim) if a in only]
    try:
        assert rp.main(argv) == 0
        result_path = out / "arms" / "margin-dw-b80" / "seed-0.json"
        result = json.loads(result_path.read_text())
        assert 0.0 <= result["metrics"]["recall@1"] <= 1.0 and len(result["history"]) >= 1
        assert result["config"]["training"]["steps_per_epoch"] * result["config"]["training"]["epochs"] == 2
        assert result["attempts"] == 1 and result["seconds"] > 0
        stamp = result_path.stat().st_mtime_ns
        capsys.readouterr()
        assert rp.main(argv) == 0  # a rerun trains nothing
        assert result_path.stat().st_mtime_ns == stamp
        assert "margin-dw-b80 seed 0" not in capsys.readouterr().out
        report = (out / "report.md").read_text()
        assert "no verdict" in report and "margin-dw-b80" in report
        with pytest.raises(SystemExit, match="trained with another config"):
            rp.main(argv[:-4] + ["--train-classes", "18", "--test-classes", "4"])
        # Without its JSON (deleted, or killed after train.py finished), a finished run folder
        # is read back only by the config that trained it.
        result_path.unlink()
        with pytest.raises(SystemExit, match="holds a run of another config"):
            rp.main(argv[:-4] + ["--train-classes", "18", "--test-classes", "4"])
        assert rp.main(argv) == 0
        again = json.loads(result_path.read_text())
        assert again["metrics"] == result["metrics"]
        # the read-back is a second attempt; its cost adds to the first one's
        assert again["attempts"] == 2 and again["seconds"] >= result["seconds"]
    finally:
        rp.claim_arms = original


def _fake_results(out, arm, finals, curve_scale=1.0, seconds=60.0):
    """Seed results of an arm: final MAP@R / R@1 = ``finals[s]``, a 4-point curve, ``seconds`` each."""
    folder = out / "arms" / arm
    folder.mkdir(parents=True, exist_ok=True)
    for seed, value in enumerate(finals):
        history = [{"epoch": e, "test_map@r": value * curve_scale * (e + 1) / 4,
                    "test_recall@1": value * curve_scale * (e + 1) / 4} for e in range(4)]
        (folder / f"seed-{seed}.json").write_text(json.dumps({
            "arm": arm, "seed": seed, "metrics": {"map@r": value, "recall@1": value, "nmi": 0.5},
            "history": history, "config": {"training": {"steps_per_epoch": 10}}, "seconds": seconds}))


def test_report_gives_the_verdict_of_the_checks_and_draws_the_curves(tmp_path):
    out = tmp_path / "out"
    _fake_results(out, "margin-dw-b80", [0.60, 0.61, 0.62])
    for beta, shift in ((0.8, 0.2), (1.0, 0.1), (1.2, 0.0), (1.4, 0.05)):
        _fake_results(out, f"margin-dw-b80-fixed{beta}", [0.60 - shift, 0.62 - shift, 0.61 - shift])
    text = rp.report("wu_beta", str(out))
    # fixed 1.2 equals the learned arm: "at least as well" holds, the others are significantly worse
    assert "+0.0 ± 0.8 holds (not worse)" in text and "+20.0 ± 0.8 holds" in text
    assert "**Verdict (map@r): reproduced.**" in text
    assert (out / "wu_beta-curves.png").stat().st_size > 0
    # a fixed β0 significantly better than the learned one: that check is reversed
    _fake_results(out, "margin-dw-b80-fixed1.2", [0.70, 0.71, 0.72])
    assert "**Verdict (map@r): partly reproduced.**" in rp.report("wu_beta", str(out))


def test_a_training_figure_is_read_from_the_history_and_lower_is_better(tmp_path):
    """hong_objective (Fig. 2): train_objective comes from the last history row (or the
    row at early_at); the IS arm's lower objective makes "lower with IS" hold, shown as it
    is (not ×100, to 3 significant digits); the curves PNG is drawn from it."""
    out = tmp_path / "out"
    for arm, finals in (("balanced-group4x16-is-fig2", [0.20, 0.21, 0.22]),
                        ("balanced-group4x16-nois-fig2", [0.30, 0.31, 0.32])):
        _fake_results(out, arm, [0.5, 0.5, 0.5])
        for seed, value in enumerate(finals):
            path = out / "arms" / arm / f"seed-{seed}.json"
            result = json.loads(path.read_text())
            for e, row in enumerate(result["history"]):
                row["train_objective"] = value * (4 - e)  # falls: 4v, 3v, 2v, v
            path.write_text(json.dumps(result))
    result = rp.load_results(str(out), "balanced-group4x16-is-fig2")[0]
    assert rp._metric(result, "train_objective") == pytest.approx(0.20)
    assert rp._metric(result, "train_objective", at=0.25) == pytest.approx(0.80)
    text = rp.report("hong_objective", str(out))
    assert "+0.1 ± 0.00816 holds" in text  # nois − is at the end
    assert "+0.4 ± 0.0327 holds" in text  # after a quarter of the budget
    assert "**Verdict (train_objective): reproduced.**" in text
    assert (out / "hong_objective-curves.png").stat().st_size > 0


def test_early_checks_read_the_curve_at_a_fraction_of_the_budget(tmp_path):
    out = tmp_path / "out"
    # margin + DW ends lower but is ahead after a quarter of the steps (curve scaled ×3)
    _fake_results(out, "margin-dw-b80", [0.20, 0.21, 0.22], curve_scale=3.0)
    _fake_results(out, "triplet-semi_hard-b80", [0.40, 0.41, 0.42])
    _fake_results(out, "contrastive-random-b80", [0.30, 0.31, 0.32], curve_scale=0.5)
    result = rp.load_results(str(out), "margin-dw-b80")[0]
    assert rp._metric(result, "map@r", at=0.25) == pytest.approx(0.20 * 3 / 4)
    assert rp._metric(result, "map@r") == 0.20
    text = rp.report("wu_sampling", str(out))
    early = text.split("Convergence")[1]
    assert "holds" in early.split("\n")[4] and "**Verdict (map@r, early): reproduced.**" in early


def test_report_md_keeps_every_claim_with_results(tmp_path, capsys):
    """report.md once held only the claims of the last command: reporting lu_topk erased the
    wu_sampling report. It now holds every claim with results, whatever --claim says."""
    out = tmp_path / "out"
    _fake_results(out, "margin-dw-b80", [0.60, 0.61, 0.62])
    _fake_results(out, "precision_at_k-m10", [0.50, 0.51, 0.52])
    rp.main(["--claim", "lu_topk", "--report", "--out", str(out)])
    report = (out / "report.md").read_text()
    assert "### lu_topk" in report and "### wu_sampling" in report and "### wu_beta" in report
    assert "### hong_designs" not in report  # no result yet
    printed = capsys.readouterr().out
    assert "### lu_topk" in printed and "### wu_sampling" not in printed  # what was asked for


def test_report_md_opens_with_each_claims_verdict_and_the_total_cost(tmp_path):
    """The summary's total counts a run two claims share once: margin-dw-b80 is an arm of
    wu_sampling and of wu_beta."""
    out = tmp_path / "out"
    _fake_results(out, "margin-dw-b80", [0.60, 0.61, 0.62], seconds=600.0)
    for beta in (0.8, 1.0, 1.2, 1.4):
        _fake_results(out, f"margin-dw-b80-fixed{beta}", [0.40, 0.41, 0.42], seconds=120.0)
    _fake_results(out, "precision_at_k-m10", [0.50, 0.51, 0.52], seconds=60.0)
    rp.main(["--claim", "wu_beta", "--report", "--out", str(out)])
    report = (out / "report.md").read_text()
    head = report.split("### ")[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in head.splitlines() if line.startswith("| ")}
    # wu_beta: 15 runs, 3 × 10 + 12 × 2 = 54 min; learned β beats every fixed one
    assert "| reproduced (map@r) | reproduced (recall@1) | 15 | 54 |" in rows["wu_beta"]
    # wu_sampling: only margin-dw-b80 is done, so no verdict
    assert "no verdict" in rows["wu_sampling"] and rows["wu_sampling"].endswith("| 3 | 30 |")
    assert rows["lu_topk"].endswith("| 3 | 3 |")
    # distinct runs: 3 + 12 + 3 = 18 (not 21), 30 + 24 + 3 = 57 min
    assert "Total: 18 distinct runs (arm × seed), 0.9 hours of this machine, 2.0 min per run" in head
    assert report.index("## Summary") < report.index("### wu_sampling") < report.index("### wu_beta")


def test_a_resumed_run_counts_the_time_of_its_earlier_attempts(tmp_path):
    """A run killed and resumed used to record only the resumed part in ``seconds``, so the
    reports' cost lines under-counted it. The ledger beside the run folder keeps every
    attempt: a finished one by its recorded end, one that was killed by the last write into
    the run folder (its last checkpoint), and a new attempt closes the old ones."""
    run_dir = tmp_path / "seed-0"
    ledger = str(tmp_path / "seed-0.attempts")
    # first attempt: started at t = 1000, killed after writing its last checkpoint at t = 1100
    rp.begin_attempt(ledger, str(run_dir), "k", now=1000.0)
    run_dir.mkdir()
    checkpoint = run_dir / "backup" / "ckpt"
    checkpoint.parent.mkdir()
    checkpoint.write_text("x")
    os.utime(checkpoint, (1100.0, 1100.0))
    # second attempt at t = 5000 (the machine was away meanwhile): it fails at t = 5030
    rp.begin_attempt(ledger, str(run_dir), "k", now=5000.0)
    rp.end_attempt(ledger, now=5030.0)
    # third attempt at t = 6000 finishes at t = 6200
    rp.begin_attempt(ledger, str(run_dir), "k", now=6000.0)
    assert rp.attempts_seconds(ledger, now=6200.0) == (3, 100.0 + 30.0 + 200.0)


def test_a_first_attempt_counts_from_its_start(tmp_path):
    ledger = str(tmp_path / "seed-0.attempts")
    rp.begin_attempt(ledger, str(tmp_path / "seed-0"), "k", now=10.0)
    assert rp.attempts_seconds(ledger, now=70.5) == (1, 60.5)


def test_every_curve_of_a_claim_has_its_own_colour_and_line_style():
    """wu_batch_size draws 15 arms: with matplotlib's 10-colour cycle two of them shared a colour
    (margin-random at batch 40 and 120, both green)."""
    styles = rp.curve_styles(len(rp.claim_arms("wu_batch_size")))
    assert len(styles) == 15 and len(set(styles)) == 15
    assert len(set(rp.curve_styles(40))) == 40
    assert len({colour for colour, _ in rp.curve_styles(10)}) == 10  # up to 10 arms: colours alone differ


def test_attempts_of_another_config_are_not_counted(tmp_path):
    """The refusal message tells the user to delete a run folder of another config (and its key);
    the ledger beside it stayed, so the new run's cost included the old config's attempts."""
    ledger = str(tmp_path / "seed-0.attempts")
    rp.begin_attempt(ledger, str(tmp_path / "seed-0"), "old-config", now=0.0)
    rp.end_attempt(ledger, now=500.0)
    rp.begin_attempt(ledger, str(tmp_path / "seed-0"), "new-config", now=1000.0)
    assert rp.attempts_seconds(ledger, now=1060.0) == (1, 60.0)
