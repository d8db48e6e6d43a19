"""study/reproduce.py: every arm is a valid config, the verdict rule, and one
real (tiny) arm run through train.py, resumed and refused when its config changes."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tfdml_app import config as tfdml_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("reproduce", os.path.join(ROOT, "study", "reproduce.py"))
rp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rp)
UNCOMMITTED_CHANGES = rp.uncommitted_changes


@pytest.fixture(autouse=True)
def _a_committed_checkout(monkeypatch):
    """The runner refuses a checkout with uncommitted changes; the tests run in a checkout that
    may have them (the tests of that refusal set them themselves)."""
    monkeypatch.setattr(rp, "uncommitted_changes", lambda: [])


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
    assert cfg("margin-dw-b40")["design"] == {"name": "m_per_class", "options": {"m": 5, "n": 8}}
    assert cfg("margin-dw-b80-fixed1.0")["loss"]["options"]["learn_beta0"] is False
    wide, narrow = cfg("balanced-prandom0.9-pairs256-is"), cfg("balanced-prandom0.9-is")
    assert (wide["design"]["options"].pop("pairs"), narrow["design"]["options"].pop("pairs")) == (256, 64)
    assert wide == narrow
    assert cfg("balanced-group16x4-is")["design"] == {"name": "group", "options": {"m": 16, "n": 4}}
    half, tenth = cfg("balanced-prandom0.5-nois"), cfg("balanced-prandom0.1-nois")
    assert (half["design"]["options"].pop("p"), tenth["design"]["options"].pop("p")) == (0.5, 0.1) and half == tenth
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
    for tag in ("is", "nois"):  # Hong's Fig. 2: the traditional contrastive loss, all else as the balanced arm
        traditional, balanced = cfg(f"contrastive-group4x16-{tag}-fig2"), cfg(f"balanced-group4x16-{tag}-fig2")
        loss = traditional.pop("loss")
        assert (loss["name"], loss["sampler"]) == ("contrastive", "by_loss")
        assert loss["options"] == {"margin": 1.0, "squared": True, "importance": tag == "is"}
        assert balanced.pop("loss")["options"]["margin"] == 1.0 and traditional == balanced
    for loss in ("contrastive", "contrastive-is", "multi_similarity"):  # XBM: the memory and nothing else
        big, none = cfg(f"xbm-{loss}-mem1024"), cfg(f"xbm-{loss}-mem0")
        assert big["loss"].pop("memory") == {"size": 1024, "warmup_steps": 500} and rp.WARMUP_KEY not in big
        assert big == none and "memory" not in none["loss"]
    assert cfg("xbm-contrastive-is-mem256")["loss"]["options"]["importance"] is True
    quick = rp.arm_config("xbm-contrastive-mem1024", 0, "v.npz", rp.BUDGETS["quick"], "out")
    assert quick["loss"]["memory"]["warmup_steps"] == rp.BUDGETS["quick"]["steps"] // 4  # a quarter of any budget
    batch = big["design"]["options"]["m"] * big["design"]["options"]["n"]
    assert all(size % batch == 0 for size in rp.XBM_SIZES)  # whole batches: the importance weights need them
    # the largest memory fills within the quick budget, after its warm-up
    assert rp.BUDGETS["quick"]["steps"] - quick["loss"]["memory"]["warmup_steps"] > max(rp.XBM_SIZES) // batch
    assert rp.config_key(cfg("margin-dw-b80")) != rp.config_key(rp.arm_config("margin-dw-b80", 1, "v.npz",
                                                                             rp.BUDGETS["standard"], "out"))
    # A results folder moved to another checkout keeps its results: folders do not count, names do.
    moved = rp.arm_config("margin-dw-b80", 0, "/elsewhere/v.npz", rp.BUDGETS["standard"], "/elsewhere/out")
    assert rp.config_key(moved) == rp.config_key(cfg("margin-dw-b80"))
    other_view = rp.arm_config("margin-dw-b80", 0, "w.npz", rp.BUDGETS["standard"], "out")
    assert rp.config_key(other_view) != rp.config_key(cfg("margin-dw-b80"))
    # float32 whatever the CPU (the default "auto" would follow it); results stored before
    # the arms named the policy (float32 then) keep their key, another policy does not.
    assert cfg("margin-dw-b80")["model"]["dtype_policy"] == "float32"
    unnamed = cfg("margin-dw-b80")
    del unnamed["model"]["dtype_policy"]
    assert rp.config_key(unnamed) == rp.config_key(cfg("margin-dw-b80"))
    bf16 = cfg("margin-dw-b80")
    bf16["model"]["dtype_policy"] = "mixed_bfloat16"
    assert rp.config_key(bf16) != rp.config_key(cfg("margin-dw-b80"))
    # The arms write the design's parameters under design.options; results stored when they
    # stood beside design.name keep their key, other parameters do not.
    old_layout = cfg("margin-dw-b80")
    old_layout["design"].update(old_layout["design"].pop("options"))
    assert "options" in cfg("margin-dw-b80")["design"]
    assert rp.config_key(old_layout) == rp.config_key(cfg("margin-dw-b80"))
    other_design = cfg("margin-dw-b80")
    other_design["design"]["options"]["m"] += 1
    assert rp.config_key(other_design) != rp.config_key(cfg("margin-dw-b80"))


def test_every_arm_validates_without_a_warning_of_an_old_layout():
    """No arm writes a key in an old place (design parameters beside design.name,
    ``loss.sampler: learned``) that validation would read with a FutureWarning."""
    import warnings

    from tfdml_app import config_checks

    for arm in rp.ARMS:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            config_checks.check_structure(rp.arm_config(arm, 0, "v.npz", rp.BUDGETS["standard"], "out"), names=True)


def test_every_claim_is_listed_with_its_checks_or_why_it_is_untested():
    """The claims table names every claim of the five seed papers the study reads, the ones not run
    included; a run claim names its experiment and checks, an untested one its reason."""
    ids = rp.paper_claims.IDS
    assert len(ids) == len(set(ids))
    assert {row["paper"] for row in rp.paper_claims.CLAIMS} >= {
        rp.paper_claims.WU, rp.paper_claims.HONG, rp.paper_claims.LU, rp.paper_claims.DUAN, rp.paper_claims.DRAFT}
    for claim_id in ("hong_t2_t4", "wu_fig8", "wu_t1_pretrain", "lu_fig4", "lu_fig4_cf", "wu_t3_range",
                     "wu_t7", "wu_fig3b", "wu_fig7", "wu_t8", "draft_t2", "draft_t4_t6",
                     "draft_fig5_6"):
        row = rp.paper_claims.by_id(claim_id)
        assert row["untested"] and "checks" not in row and "experiment" not in row
    for row in rp.paper_claims.CLAIMS:
        if row.get("untested"):
            continue
        assert row["experiment"] in rp.CLAIMS and row["checks"]
        assert set(rp.row_arms(row)) <= set(rp.claim_arms(row["experiment"]))
        assert row.get("kind", "better") in rp.verdicts.KINDS
        # one metric for every claim; only a claim of a training figure names its own, the one its
        # experiment records
        assert row.get("metric", rp.VERDICT_METRIC) in (rp.VERDICT_METRIC,
                                                        rp.CLAIMS[row["experiment"]].get("curve_metric"))
    # Only Hong's Fig. 4 ("not sensitive to λ") and the draft's thesis ("the contrastive loss is
    # enough") are not-worse claims; Hong's checks sit inside the range the paper finds near the
    # maximum, and its ends are "better" checks.
    assert [row["id"] for row in rp.paper_claims.CLAIMS if row.get("kind") == "not worse"] == [
        "hong_fig4", "draft_thesis"]
    thesis = rp.paper_claims.by_id("draft_thesis")["checks"]
    assert all(better.startswith("contrastive-") and not worse.startswith("contrastive-")
               and better.split("-", 1)[1] == worse.split("-", 1)[1] for better, worse in thesis)
    lams = [rp.ARMS[a]["loss"]["options"]["lam"] for check in rp.paper_claims.by_id("hong_fig4")["checks"]
            for a in check]
    assert lams == [128.0, 256.0, 512.0, 256.0]
    ends = rp.paper_claims.by_id("hong_fig4_ends")["checks"]
    assert [rp.ARMS[worse]["loss"]["options"]["lam"] for _, worse in ends] == [1.0, 8192.0]
    # Duan's Table 3 has no distance weighted row
    assert rp.paper_claims.by_id("duan_t3_semi")["checks"] == [("triplet-learned-b80", "triplet-semi_hard-b80")]
    # Hong's Fig. 2 is the traditional contrastive loss, read early (faster) and at the end (lower)
    fig2 = rp.paper_claims.by_id("hong_fig2")
    assert fig2["checks"] == [("contrastive-group4x16-is-fig2", "contrastive-group4x16-nois-fig2")]
    assert fig2["metric"] == "train_objective" and fig2["at"][-1] is None and len(fig2["at"]) > 1
    # Hong's Fig. 2 R@1 panel and Tables 2–3's Contrastive against Contrastive+IS rows read the
    # same `-fig2` arms (the traditional contrastive loss), on the retrieval metric
    for claim_id in ("hong_fig2_recall", "hong_t2_t3_is"):
        row = rp.paper_claims.by_id(claim_id)
        assert row["checks"] == fig2["checks"] and "metric" not in row
    assert "hong_t2_t3_is" in rp.paper_claims.by_id("hong_t2_t4")["untested"]
    # Duan's Fig. 3 (early gain) reads the learned arm's curve against random tuples at its count
    duan_fig3 = rp.paper_claims.by_id("duan_fig3")
    assert duan_fig3["checks"] == rp.paper_claims.by_id("duan_t3_random")["checks"] and duan_fig3["at"][0] < 0.25
    # Hong's Table 1 rows of the (16, 4)-group and p = 0.5: importance sampling improves them too
    assert rp.paper_claims.by_id("hong_t1_rows")["checks"] == [
        ("balanced-group16x4-is", "balanced-group16x4-nois"), ("balanced-prandom0.5-is", "balanced-prandom0.5-nois")]


def test_uniform_triplet_arms_are_the_papers_random_baselines():
    """Lu's "uniform triplets are worst" compares the four baselines at Lu's design; Duan's
    "DE-DSP beats random triplets" compares random triplets at the learned arm's tuples per step."""
    lu = rp.paper_claims.by_id("lu_uniform")
    assert lu["experiment"] == "lu_topk"
    assert lu["checks"] == [(f"triplet-{s}-m10", "triplet-random-m10") for s in ("hard", "semi_hard", "dw")]
    for arm in ("triplet-random-m10", "triplet-hard-m10"):
        assert rp.ARMS[arm]["design"] == rp.ARMS["triplet-semi_hard-m10"]["design"]
        assert rp.ARMS[arm]["loss"]["options"] == rp.ARMS["triplet-semi_hard-m10"]["loss"]["options"]
    assert rp.ARMS["triplet-random-m10"]["loss"]["sampler"] == "random_triplets"
    assert "sampler_options" not in rp.ARMS["triplet-random-m10"]["loss"]  # one negative per positive pair
    duan = rp.paper_claims.by_id("duan_t3_random")
    assert duan["experiment"] == "duan_dsn" and duan["checks"] == [("triplet-learned-b80", "triplet-random-b80-t64")]
    options = rp.ARMS["triplet-learned-b80"]["learned_sampler"]
    random_arm = rp.ARMS["triplet-random-b80-t64"]
    assert random_arm["loss"]["sampler_options"] == {
        "num_triplets": options["minibatches"] * options["tuples_per_minibatch"]}
    assert random_arm["design"] == rp.ARMS["triplet-learned-b80"]["design"]
    for claim, arms in (("lu_topk", lu["checks"]), ("duan_dsn", duan["checks"])):
        assert {a for check in arms for a in check} <= set(rp.claim_arms(claim))


def test_view_keeps_a_fixed_sample_of_test_classes(kanji_dir, tmp_path):
    path = rp.make_view(kanji_dir, str(tmp_path), train_classes=4, test_classes=3)
    with np.load(path) as view:
        labels, test = view["labels"], view["test"]
        assert len(np.unique(labels[test])) == 3 and len(np.unique(labels[~test])) == 4
        assert set(labels[test]) <= set(range(0x4E00 + 24, 0x4E00 + 30))
    again = rp.make_view(kanji_dir, str(tmp_path / "other"), train_classes=4, test_classes=3)
    with np.load(again) as other:
        np.testing.assert_array_equal(other["labels"], labels)


def test_two_runners_cutting_the_same_view_at_once_both_finish_with_a_whole_file(kanji_dir, tmp_path, monkeypatch):
    """Two reproduce.py processes sharing --out may cut the same view at the same moment: the
    second writes and renames its file while the first is between its write and its rename.
    Each writes its own temporary file, so both finish and the view is whole."""
    real_savez, calls = np.savez, []

    def savez_then_the_other_runner(path, **arrays):
        real_savez(path, **arrays)
        calls.append(path)
        if len(calls) == 1:  # the other runner cuts the same view now, start to end
            rp.make_view(kanji_dir, str(tmp_path), train_classes=4, test_classes=3)

    monkeypatch.setattr(rp.np, "savez", savez_then_the_other_runner)
    path = rp.make_view(kanji_dir, str(tmp_path), train_classes=4, test_classes=3)
    assert len(calls) == 2 and calls[0] != calls[1]
    with np.load(path) as view:
        assert len(np.unique(view["labels"][view["test"]])) == 3
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(path)]


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
    data = tmp_path / "kanji"
    shutil.copytree(kanji_dir, data)
    manifest = {"checksum": "ab" * 32, "settings": {"size": 32, "chars": "latin", "min_per_class": 5},
                "faces": [{"path": "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "package": "fonts-dejavu-core",
                           "package_version": "2.37-8"}]}
    (data / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "out"
    argv = ["--claim", "wu_beta", "--seeds", "0", "--data", str(data), "--out", str(out),
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
        # provenance: the data set's checksum and build command, package versions, the commit
        provenance = result["provenance"]
        assert provenance["data"]["checksum"] == "ab" * 32
        assert provenance["data"]["build_command"] == ("python study/kanji_fonts.py --size 32 --chars latin "
                                                       "--min-per-class 5")
        assert provenance["data"]["font_packages"] == ["fonts-dejavu-core=2.37-8"]
        assert "numpy" in provenance["packages"] and provenance["git_commit"]
        # the stored config names no folder of this machine
        assert result["config"]["output_dir"] == "$OUT/arms/margin-dw-b80/seed-0"
        assert result["config"]["data"]["options"]["path"].startswith("$OUT/view-")
        stamp = result_path.stat().st_mtime_ns
        capsys.readouterr()
        assert rp.main(argv) == 0  # a rerun trains nothing
        assert result_path.stat().st_mtime_ns == stamp
        assert "margin-dw-b80 seed 0" not in capsys.readouterr().out
        report = (out / "report.md").read_text()
        assert "**untested**" in report and "margin-dw-b80" in report
        # the folder records the experiment --claim started, not the others sharing its arm
        assert rp.experiments_in(str(out)) == ["wu_beta"] and "### wu_sampling" not in report
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
        # A result trained before the data set checksum was recorded is kept as it is, unless
        # --rerun-unrecorded: then it trains again from the start and keeps the earlier figures.
        unrecorded = {k: v for k, v in again.items() if k != "provenance"}
        unrecorded["metrics"] = {**again["metrics"], "map@r": 0.123}
        result_path.write_text(json.dumps(unrecorded))
        assert rp.main(argv) == 0 and "provenance" not in json.loads(result_path.read_text())
        assert rp.main(argv + ["--rerun-unrecorded"]) == 0
        rerun = json.loads(result_path.read_text())
        assert rerun["provenance"]["data"]["checksum"] == "ab" * 32
        assert rerun["attempts"] == 1 and rerun["replaces"]["metrics"]["map@r"] == 0.123
        assert not (out / "arms" / "margin-dw-b80" / "seed-0.replaced").exists()
        assert rp.main(argv + ["--rerun-unrecorded"]) == 0  # recorded now: not trained a third time
        assert json.loads(result_path.read_text())["finished"] == rerun["finished"]
        assert rerun["replaces"]["because"] == rp.reruns.UNRECORDED
        assert rerun["replaces"]["figures"]["outcome"] == rp.reruns.DIFFER
        # A result trained with uncommitted code is kept as it is, unless --verify-provenance:
        # then it trains again from this (committed) checkout, keeps the earlier figures and says
        # how the metrics compare.
        dirty = {**rerun, "metrics": {**rerun["metrics"], "map@r": 0.456}}
        dirty["provenance"] = {**rerun["provenance"], "git_commit": "0" * 40 + "+dirty"}
        result_path.write_text(json.dumps(dirty))
        assert rp.main(argv + ["--rerun-unrecorded"]) == 0  # it records its data set: not trained
        assert json.loads(result_path.read_text())["finished"] == rerun["finished"]
        capsys.readouterr()
        assert rp.main(argv + ["--verify-provenance"]) == 0
        assert "(rerun: its result was of uncommitted code)" in capsys.readouterr().out
        verified = json.loads(result_path.read_text())
        assert not verified["provenance"]["git_commit"].endswith("+dirty")
        replaced = verified["replaces"]
        assert replaced["because"] == rp.reruns.UNCOMMITTED and replaced["metrics"]["map@r"] == 0.456
        assert replaced["provenance"]["git_commit"] == "0" * 40 + "+dirty"
        assert replaced["figures"]["outcome"] == rp.reruns.DIFFER
        assert replaced["figures"]["differences"]["map@r"] == pytest.approx(verified["metrics"]["map@r"] - 0.456)
        # the chain: the rerun it replaced had itself replaced a result without a checksum
        assert replaced["replaces"]["because"] == rp.reruns.UNRECORDED
        assert rp.reruns.replaced_for(verified, rp.reruns.UNRECORDED)["metrics"]["map@r"] == 0.123
        assert not (out / "arms" / "margin-dw-b80" / "seed-0.replaced").exists()
        assert rp.main(argv + ["--verify-provenance"]) == 0  # committed now: not trained a third time
        assert json.loads(result_path.read_text())["finished"] == verified["finished"]
        # cut right after the result was set aside: whatever trains the seed next (run_arm, with
        # or without a flag) finds the copy and records what it replaces
        result_path.write_text(json.dumps(dirty))
        arm_dir = str(out / "arms" / "margin-dw-b80")
        assert rp.set_aside("margin-dw-b80", 0, str(out), rp.reruns.UNCOMMITTED) and not result_path.exists()
        kept = rp.reruns.take_replaced(arm_dir, 0, {"map@r": 0.456, "recall@1": -1.0})
        assert kept["because"] == rp.reruns.UNCOMMITTED and kept["metrics"]["map@r"] == 0.456
        assert kept["figures"]["outcome"] == rp.reruns.DIFFER and list(kept["figures"]["differences"]) == ["recall@1"]
        with pytest.raises(SystemExit, match="--arm triplet-dw-b80 is not an arm of wu_beta"):
            rp.main(argv + ["--arm", "triplet-dw-b80"])
    finally:
        rp.claim_arms = original


def test_two_runners_of_one_claim_share_its_runs(kanji_dir, tmp_path, monkeypatch, capsys):
    """A second reproduce.py started on the same claims and --out skips each (arm, seed) that a
    live runner has taken and trains the others; a dead runner's claim is taken over."""
    import socket

    from tfdml import runs

    out = tmp_path / "out"
    arms = rp.claim_arms("lu_topk")[:3]
    monkeypatch.setattr(rp, "claim_arms", lambda claim: arms)
    trained = []
    monkeypatch.setattr(rp, "run_arm", lambda arm, seed, *a, **k: trained.append((arm, seed)) or
                        {"metrics": {"recall@1": 0.5}, "seconds": 1.0})
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        taken = rp.runner_lock(str(out), arms[0], 0)
        os.makedirs(os.path.dirname(taken.path), exist_ok=True)
        with open(taken.path, "w") as f:  # the other runner holds (arms[0], seed 0)
            json.dump({"pid": other.pid, "host": socket.gethostname()}, f)
        dead = rp.runner_lock(str(out), arms[1], 0)
        os.makedirs(os.path.dirname(dead.path), exist_ok=True)
        with open(dead.path, "w") as f:  # a runner killed while it trained (arms[1], seed 0)
            json.dump({"pid": 2 ** 22 + 12345, "host": socket.gethostname()}, f)
        argv = ["--claim", "lu_topk", "--seeds", "0", "--data", kanji_dir, "--out", str(out),
                "--steps", "2", "--train-classes", "20", "--test-classes", "4"]
        assert rp.main(argv) == 0
        assert trained == [(arms[1], 0), (arms[2], 0)]
        printed = capsys.readouterr().out
        assert f"{arms[0]} seed 0: taken by another runner (PID {other.pid})" in printed
        assert not os.path.exists(dead.path)  # released after its run
        assert isinstance(taken, runs.RunLock)
    finally:
        other.kill()
        other.wait()


def _fake_results(out, arm, finals, curve_scale=1.0, seconds=60.0, checksum=None):
    """Seed results of an arm: final MAP@R / R@1 = ``finals[s]``, a 4-point curve, ``seconds`` each,
    trained on the data set version ``checksum`` (None: not recorded)."""
    folder = out / "arms" / arm
    folder.mkdir(parents=True, exist_ok=True)
    for seed, value in enumerate(finals):
        history = [{"epoch": e, "test_map@r": value * curve_scale * (e + 1) / 4,
                    "test_recall@1": value * curve_scale * (e + 1) / 4} for e in range(4)]
        result = {"arm": arm, "seed": seed, "metrics": {"map@r": value, "recall@1": value, "nmi": 0.5},
                  "history": history, "config": {"training": {"steps_per_epoch": 10}}, "seconds": seconds}
        if checksum:
            result["provenance"] = {"data": {"checksum": checksum}}
        (folder / f"seed-{seed}.json").write_text(json.dumps(result))


def _check_rows(text):
    """{check label: its table row's cells} of a report."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if line.startswith("| ") and " > " in cells[0]:
            rows[cells[0]] = cells
    return rows


def test_report_gives_the_verdict_of_the_paired_checks_and_draws_the_curves(tmp_path):
    out = tmp_path / "out"
    _fake_results(out, "margin-dw-b80", [0.60, 0.61, 0.62])
    for beta, shift in ((0.8, 0.2), (1.0, 0.1), (1.2, 0.0), (1.4, 0.05)):
        _fake_results(out, f"margin-dw-b80-fixed{beta}", [0.60 - shift, 0.61 - shift, 0.62 - shift + 0.001 * beta])
    text = rp.report("wu_beta", str(out))
    rows = _check_rows(text)
    # fixed 1.2 equals the learned arm seed by seed (up to 0.0012): level, so Wu's "learned beats
    # every fixed β0" is partly reproduced; no non-inferiority rule lifts it
    assert rows["margin-dw-b80 > margin-dw-b80-fixed1.2"][-1].startswith("unresolved")
    assert rows["margin-dw-b80 > margin-dw-b80-fixed0.8"][-1] == "holds"
    assert "#### wu_t3_f (Wu et al. 2017, Table 3 (f)): **partly**" in text
    assert (out / "wu_beta-curves.png").stat().st_size > 0
    # a fixed β0 better than the learned one on every seed: that check is reversed
    _fake_results(out, "margin-dw-b80-fixed1.2", [0.70, 0.71, 0.72])
    assert "#### wu_t3_f (Wu et al. 2017, Table 3 (f)): **contradicted**" in rp.report("wu_beta", str(out))


def test_wanted_lists_the_seeds_that_could_decide_an_open_check(tmp_path, capsys):
    out = tmp_path / "out"
    _fake_results(out, "margin-dw-b80", [0.60, 0.61, 0.62], seconds=120.0)
    for beta, shift in ((0.8, 0.2), (1.0, 0.1), (1.2, 0.15), (1.4, 0.05)):
        _fake_results(out, f"margin-dw-b80-fixed{beta}", [0.60 - shift, 0.61 - shift, 0.62 - shift + 0.001 * beta],
                      seconds=120.0)
    rp.mark_started(str(out), ["wu_beta"])
    assert "wu_beta" not in rp.seeds_wanted(str(out))  # every check holds on 3 seeds
    # one fixed β level with the learned one: that check needs 5 seeds, so seeds 3 and 4 of every arm
    _fake_results(out, "margin-dw-b80-fixed1.2", [0.601, 0.608, 0.621], seconds=120.0)
    checks = rp.judge_claim(rp.paper_claims.by_id("wu_t3_f"), str(out))["checks"]
    assert [c["outcome"] for c in checks].count(rp.verdicts.NEEDS_SEEDS) == 1
    wanted = rp.seeds_wanted(str(out))
    seeds, open_checks, runs, median = wanted["wu_beta"]
    assert (seeds, open_checks, runs, median) == ([3, 4], 1, 10, 2.0)  # 5 arms × 2 seeds
    # wu_sampling shares margin-dw-b80 but was not started in this folder: no run is asked for it
    assert list(wanted) == ["wu_beta"]
    # started, it asks for every seed of its other arms and counts margin-dw-b80's seeds 3 and 4
    # once (wu_sampling is listed first, so wu_beta no longer counts them)
    rp.mark_started(str(out), ["wu_sampling"])
    wanted = rp.seeds_wanted(str(out))
    assert wanted["wu_sampling"][0] == [0, 1, 2, 3, 4] and wanted["wu_beta"][2] == 8
    assert rp.main(["--wanted", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"python study/reproduce.py --claim wu_beta --out {out} --seeds 3 4   # 1 open check(s), 8 run(s) " \
           "to add, ~0.3 h of one runner" in text
    # these results record no data set checksum: one command trains them again, at their own cost
    assert f"python study/reproduce.py --claim wu_sampling --claim wu_beta --out {out} --seeds 0 1 2 " \
           "--rerun-unrecorded   # 15 result(s) without a data set checksum, ~0.5 h of one runner" in text
    for path in (out / "arms").glob("*/seed-*.json"):
        path.write_text(json.dumps({**json.loads(path.read_text()), "provenance": {"data": {"checksum": "a" * 64}}}))
    assert "--rerun-unrecorded" not in rp.wanted_text(str(out))


def test_wanted_commands_run_in_the_budget_of_the_folder(tmp_path, capsys):
    """A run --wanted prints for another budget's folder adds to that folder, in that budget."""
    for folder, option in (("wu_scratch", "--budget wu_scratch"), ("standard", ""), ("mine", None)):
        out = tmp_path / folder
        _fake_results(out, "margin-dw-b80", [0.60, 0.61, 0.62])
        rp.mark_started(str(out), ["wu_beta"])
        assert rp.main(["--wanted", "--out", str(out)]) == 0
        command = capsys.readouterr().out.splitlines()[0].split("   #")[0]
        if option is None:  # a folder of no budget's name: its path says where
            option = f"--out {out}"
        assert command == " ".join(filter(None, ["python study/reproduce.py --claim wu_beta", option,
                                                 "--seeds 0 1 2 3 4"]))


def test_the_report_reads_its_verdict_from_the_verdict_function(tmp_path):
    """Every outcome and verdict printed is :func:`verdicts.judge`'s on the paired seed values."""
    out = tmp_path / "out"
    _fake_results(out, "precision_at_k-m10", [0.50, 0.55, 0.60])
    _fake_results(out, "triplet-semi_hard-m10", [0.49, 0.545, 0.59])
    _fake_results(out, "triplet-dw-m10", [0.52, 0.57, 0.61])
    row = rp.paper_claims.by_id("lu_t1")
    judged, verdict = rp.verdicts.judge([
        {"better": {0: 0.50, 1: 0.55, 2: 0.60}, "worse": {0: 0.49, 1: 0.545, 2: 0.59}},
        {"better": {0: 0.50, 1: 0.55, 2: 0.60}, "worse": {0: 0.52, 1: 0.57, 2: 0.61}}])
    text = rp.claim_detail(row, str(out))
    rows = _check_rows(text)
    for (better, worse), expected in zip(row["checks"], judged):
        assert rows[f"{better} > {worse}"][-1] == expected["outcome"]
    assert f"**{verdict}**" in text.splitlines()[0]


def test_a_reported_metric_shows_the_paired_mean_and_se_of_the_judged_statistic(tmp_path):
    """The R@1 column of a check: mean and SE of the per-seed differences, by hand; one shared
    seed gives its difference and no SE; none gives no figure."""
    out = tmp_path / "out"
    _fake_results(out, "a", [0.50, 0.60, 0.70])
    _fake_results(out, "b", [0.48, 0.57, 0.66])  # differences 0.02, 0.03, 0.04: mean 0.03, sd 0.01
    mean, se, n = rp.paired_summary(str(out), ("a", "b"), "recall@1")
    assert (mean, se, n) == (pytest.approx(0.03), pytest.approx(0.01 / np.sqrt(3)), 3)
    _fake_results(out, "c", [0.45])
    assert rp.paired_summary(str(out), ("a", "c"), "recall@1") == (pytest.approx(0.05), None, 1)
    assert rp.paired_summary(str(out), ("a", "missing"), "recall@1") == (None, None, 0)


def test_a_training_figure_is_read_from_the_history_and_lower_is_better(tmp_path):
    """hong_objective: train_objective comes from the last history row (or the row at a fraction
    of the budget); the IS arm's lower objective makes "lower with IS" hold, shown as it is (not
    ×100, to 3 significant digits); the curves PNG is drawn from it."""
    out = tmp_path / "out"
    for arm, finals in (("balanced-group4x16-is-fig2", [0.20, 0.21, 0.22]),
                        ("balanced-group4x16-nois-fig2", [0.30, 0.315, 0.33]),
                        ("contrastive-group4x16-is-fig2", [0.20, 0.21, 0.22]),
                        ("contrastive-group4x16-nois-fig2", [0.30, 0.315, 0.33])):
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
    rows = _check_rows(text)
    # nois − is per seed: 0.10, 0.105, 0.11 (mean 0.105, SE 0.00289)
    assert rows["balanced-group4x16-is-fig2 > balanced-group4x16-nois-fig2"][3] == "+0.105 ± 0.00289"
    assert "#### hong_objective_lower (investigation, of hong_fig2): **supported**" in text
    # Hong's own Fig. 2 (traditional loss): the same checks after 12.5 % and 25 % of the steps and at the end
    fig2 = _check_rows(rp.claim_detail(rp.paper_claims.by_id("hong_fig2"), str(out)))
    label = "contrastive-group4x16-is-fig2 > contrastive-group4x16-nois-fig2"
    assert set(fig2) == {label, f"{label}, after 12.5% of the steps", f"{label}, after 25.0% of the steps"}
    assert fig2[label][3] == "+0.105 ± 0.00289"
    assert fig2[f"{label}, after 25.0% of the steps"][3] == "+0.42 ± 0.0115"  # the first point: 4v
    assert (out / "hong_objective-curves.png").stat().st_size > 0


def test_hong_fig2_arms_score_the_objective_without_importance_weights(kanji_dir, tmp_path):
    """Fig. 2 compares runs with and without IS on one objective, Eq. 10: the IS arm's
    train_objective is the loss of the no-IS arm on the same fixed sample, unweighted."""
    from tfdml_app import data, fit_loops

    budget = {"steps": 2, "evaluations": 1, "train_classes": 20, "test_classes": 4}
    values = []
    for arm in ("contrastive-group4x16-is-fig2", "contrastive-group4x16-nois-fig2"):
        view = rp.view_of(arm, kanji_dir, str(tmp_path), budget)
        cfg = tfdml_config.validate(rp.arm_config(arm, 0, view, budget, str(tmp_path / arm)))
        split = data.build_source(cfg).split(cfg["data"]["train_split"])
        objective = fit_loops.objective_on_sample(cfg, split, int(split.num_classes))
        embeddings = np.random.default_rng(0).normal(size=(len(objective.y["label"]), 8)).astype(np.float32)
        values.append(float(objective.loss(objective.y, embeddings)))
    assert values[0] == pytest.approx(values[1], rel=1e-6) and values[0] > 0


def test_checks_at_a_fraction_of_the_budget_read_the_curve(tmp_path):
    out = tmp_path / "out"
    # margin + DW ends lower but is ahead early (curve scaled ×3)
    _fake_results(out, "margin-dw-b80", [0.20, 0.21, 0.22], curve_scale=3.0)
    _fake_results(out, "triplet-semi_hard-b80", [0.40, 0.41, 0.425])
    _fake_results(out, "contrastive-random-b80", [0.30, 0.31, 0.32], curve_scale=0.5)
    result = rp.load_results(str(out), "margin-dw-b80")[0]
    assert rp._metric(result, "map@r", at=0.25) == pytest.approx(0.20 * 3 / 4)
    assert rp._metric(result, "map@r") == 0.20
    rows = _check_rows(rp.claim_detail(rp.paper_claims.by_id("wu_fig6_g"), str(out)))
    early = rows["margin-dw-b80 > triplet-semi_hard-b80, after 25.0% of the steps"]
    # a quarter of the 4-point curve is its first point: margin 3v/4, triplet v/4, paired by seed
    expected = np.mean(0.75 * np.array([0.20, 0.21, 0.22]) - 0.25 * np.array([0.40, 0.41, 0.425]))
    assert early[3].startswith(f"{100 * expected:+.1f} ± ")
    assert "validation split's curve" not in rp.claim_detail(rp.paper_claims.by_id("wu_fig6_g"), str(out))
    # a budget with a validation split evaluates it along the way (the test split once, at the
    # end): the same checks read the validation curve, and the report says so
    scratch = tmp_path / "wu_scratch"
    shutil.copytree(out, scratch)
    for path in (scratch / "arms").glob("*/seed-*.json"):
        result = json.loads(path.read_text())
        result["history"] = [{k.replace("test_", "val_"): v for k, v in row.items()} for row in result["history"]]
        path.write_text(json.dumps(result))
    detail = rp.claim_detail(rp.paper_claims.by_id("wu_fig6_g"), str(scratch))
    assert _check_rows(detail)["margin-dw-b80 > triplet-semi_hard-b80, after 25.0% of the steps"][3] == early[3]
    assert "A check after a fraction of the steps reads the validation split's curve" in detail


def test_a_verdict_refuses_results_of_two_data_set_versions(tmp_path):
    out = tmp_path / "out"
    _fake_results(out, "precision_at_k-m10", [0.50, 0.55, 0.60], checksum="a" * 64)
    _fake_results(out, "triplet-semi_hard-m10", [0.49, 0.54, 0.59], checksum="a" * 64)
    _fake_results(out, "triplet-dw-m10", [0.49, 0.54, 0.59])  # predates the record: allowed, and said
    rp.mark_started(str(out), ["lu_topk"])
    row = rp.paper_claims.by_id("lu_t1")
    assert rp.judge_claim(row, str(out))["verdict"] in rp.verdicts.VERDICT_WORDS
    assert "checksum not recorded (3 of 9 runs)" in rp.report("lu_topk", str(out), draw=False)
    _fake_results(out, "triplet-dw-m10", [0.49, 0.54, 0.59], checksum="b" * 64)
    with pytest.raises(rp.MixedDataVersions, match="2 versions of the kanji set"):
        rp.judge_claim(row, str(out))
    with pytest.raises(SystemExit, match="2 versions of the kanji set"):
        rp.main(["report", "--out", str(out), "--results", str(tmp_path / "RESULTS.md")])


def _versioned_copy(kanji_dir, folder, checksum):
    """The stand-in kanji set in ``folder`` with a manifest naming ``checksum``."""
    if not folder.exists():
        shutil.copytree(kanji_dir, folder)
    (folder / "manifest.json").write_text(json.dumps({"checksum": checksum}))
    return str(folder)


def test_a_view_cut_from_another_version_of_the_set_is_not_reused(kanji_dir, tmp_path):
    data = _versioned_copy(kanji_dir, tmp_path / "kanji", "a" * 64)
    view = rp.make_view(data, str(tmp_path / "out"), train_classes=4, test_classes=3)
    assert rp.make_view(data, str(tmp_path / "out"), train_classes=4, test_classes=3) == view
    assert rp.view_checksum(view) == "a" * 64
    # a floor scored on another version is not reused either
    (tmp_path / "out" / "floor.json").write_text(json.dumps({"data_checksum": "b" * 64, "metrics": {}}))
    with pytest.raises(SystemExit, match="another version of the kanji set"):
        rp.raw_pixel_floor(view, str(tmp_path / "out"))
    _versioned_copy(kanji_dir, tmp_path / "kanji", "b" * 64)  # the set rebuilt
    with pytest.raises(SystemExit, match="another version of the kanji set"):
        rp.make_view(data, str(tmp_path / "out"), train_classes=4, test_classes=3)


def test_verify_floor_recomputes_the_floor_and_records_the_checksum_of_an_older_one(kanji_dir, tmp_path, capsys):
    """A floor.json that predates the checksum record gets the set's checksum only when the
    floor recomputed from that set matches it; a floor of other test images is named, not fixed."""
    data = _versioned_copy(kanji_dir, tmp_path / "kanji", "a" * 64)
    out = tmp_path / "out"
    quick = rp.BUDGETS["quick"]  # the view the command cuts for --budget quick
    view = rp.make_view(data, str(out), quick["train_classes"], quick["test_classes"])
    floor = rp.raw_pixel_floor(view, str(out))
    assert floor["data_checksum"] == "a" * 64 and floor["images"] > 0
    older = {k: v for k, v in floor.items() if k != "data_checksum"}  # as written before the record
    (out / "floor.json").write_text(json.dumps(older))
    assert rp.verify_floor(view, str(out)) == []
    verified = json.loads((out / "floor.json").read_text())
    assert verified["data_checksum"] == "a" * 64 and "verify-floor" in verified["data_checksum_verified"]
    # other test images: a figure moved by more than rounding, or another image count
    for key, moved in (("map@r", older["metrics"]["map@r"] + 1e-3), ("images", older["images"] + 1)):
        other = json.loads(json.dumps(older))
        if key == "images":
            other["images"] = moved
        else:
            other["metrics"][key] = moved
        (out / "floor.json").write_text(json.dumps(other))
        differences = rp.verify_floor(view, str(out))
        assert len(differences) == 1 and differences[0].startswith(key)
        assert "data_checksum" not in json.loads((out / "floor.json").read_text())  # nothing recorded
    # a rounding-sized difference is the same images
    other = json.loads(json.dumps(older))
    other["metrics"]["map@r"] += rp.SAME_FIGURES_TOLERANCE / 2
    (out / "floor.json").write_text(json.dumps(other))
    assert rp.verify_floor(view, str(out)) == []
    # the command: exit 1 naming the figures and what to do
    other["metrics"]["nmi"] += 0.01
    other.pop("data_checksum", None)
    (out / "floor.json").write_text(json.dumps(other))
    assert rp.main(["verify-floor", "--data", data, "--out", str(out), "--budget", "quick"]) == 1
    err = capsys.readouterr().err
    assert "nmi" in err and "map@r" not in err and "another --out" in err
    other["metrics"]["nmi"] -= 0.01
    (out / "floor.json").write_text(json.dumps(other))
    assert rp.main(["verify-floor", "--data", data, "--out", str(out), "--budget", "quick"]) == 0
    assert "the same test images" in capsys.readouterr().out


def test_the_data_line_counts_older_results_scored_on_the_floors_test_images(tmp_path):
    out = tmp_path / "out"
    _fake_results(out, "margin-dw-b80", [0.60, 0.61, 0.62])
    results = rp.load_results(str(out), "margin-dw-b80")
    for r, queries in zip(results, (24201, 24201, 100)):
        r["metrics"]["num_queries"] = queries
    line = rp.data_line(results, {"images": 24201, "data_checksum": "a" * 64})
    assert "not recorded (3 of 3 runs)" in line
    assert "2 of them were scored on 24,201 test images" in line and "aaaaaaaaaaaa…" in line
    assert "scored on" not in rp.data_line(results)  # no floor, nothing to compare with
    # trained again with the checksum recorded: how far each rerun's MAP@R is from the earlier run's
    for r, earlier in zip(results, (0.59, 0.6125, 0.62)):
        r["provenance"] = {"data": {"checksum": "a" * 64}}
        r["replaces"] = {"metrics": {"map@r": earlier}}
    line = rp.data_line(results)
    assert "not recorded" not in line and "kanji set checksum aaaaaaaaaaaa… (3 runs)" in line
    assert "3 of them trained again once the checksum was recorded" in line
    assert "by 0.25 points (median; at most 1.00)" in line
    assert "and 1 of them gave the earlier run's figures again" in line  # the third: 0.62 both times
    # the same run: every metric both record within the tolerance, not MAP@R alone
    results[2]["metrics"]["nmi"], results[2]["replaces"]["metrics"]["nmi"] = 0.9, 0.9 + 1e-3
    assert "figures again" not in rp.data_line(results)
    results[2]["replaces"]["metrics"]["nmi"] = 0.9 + 1e-8
    results[2]["replaces"]["metrics"]["map@r"] = 0.62 + 3e-8
    assert rp.gave_the_earlier_figures(results[2]) and not rp.gave_the_earlier_figures(results[0])


def test_compare_figures_tells_bit_identical_from_within_tolerance_from_different():
    """Hand cases: every metric both record as the same float64; each within 1e-6; one further."""
    earlier = {"map@r": 0.25, "recall@1": 0.5, "num_queries": 100, "name": "x"}
    same = rp.reruns.compare_figures(earlier, dict(earlier))
    assert same == {"outcome": "identical", "tolerance": 1e-6, "compared": 3, "differences": {}}
    close = rp.reruns.compare_figures(earlier, {**earlier, "map@r": 0.25 + 4e-7})
    assert close["outcome"] == "within tolerance" and close["differences"] == {"map@r": pytest.approx(4e-7)}
    far = rp.reruns.compare_figures(earlier, {**earlier, "map@r": 0.2, "recall@1": 0.5 + 1e-9})
    assert far["outcome"] == "differ" and set(far["differences"]) == {"map@r", "recall@1"}
    assert far["differences"]["map@r"] == pytest.approx(-0.05)
    # a metric one run lacks is not compared; none in common: no outcome
    assert rp.reruns.compare_figures(earlier, {"map@r": 0.25, "nmi": 0.7})["compared"] == 1
    assert rp.reruns.compare_figures(earlier, {"nmi": 0.7})["outcome"] is None
    assert rp.reruns.compare_figures(None, earlier)["outcome"] is None


def test_set_aside_refuses_an_unknown_reason_and_leaves_a_result_that_needs_no_rerun(tmp_path):
    arm_dir = tmp_path / "arms" / "a"
    arm_dir.mkdir(parents=True)
    result = {"metrics": {"map@r": 0.5}, "provenance": {"git_commit": "abc"}}
    (arm_dir / "seed-0.json").write_text(json.dumps(result))
    with pytest.raises(ValueError, match="unknown reason"):
        rp.reruns.set_aside(str(arm_dir), 0, "because", rp.reruns.from_uncommitted_code)
    assert not rp.set_aside("a", 0, str(tmp_path), rp.reruns.UNCOMMITTED)  # committed: kept
    assert (arm_dir / "seed-0.json").exists()
    result["provenance"]["git_commit"] = "abc+dirty"
    (arm_dir / "seed-0.json").write_text(json.dumps(result))
    assert rp.set_aside("a", 0, str(tmp_path), rp.reruns.UNCOMMITTED)
    assert not (arm_dir / "seed-0.json").exists()
    kept = json.loads((arm_dir / "seed-0.replaced").read_text())
    assert kept["because"] == rp.reruns.UNCOMMITTED and kept["metrics"] == result["metrics"]


def test_the_data_line_says_what_the_reruns_of_uncommitted_code_gave(tmp_path):
    out = tmp_path / "out"
    _fake_results(out, "margin-dw-b80", [0.60, 0.61, 0.62])
    results = rp.load_results(str(out), "margin-dw-b80")
    zen4 = "Linux x86_64, AMD EPYC (family 25 model 17, AVX-512, AVX2), 2 usable cores, load average 1.00, no GPU"
    xeon = "Linux x86_64, Intel(R) Xeon(R) Processor (family 6 model 167, AVX2), 2 usable cores, load average 1, no GPU"
    # identical on the same CPU type; within the tolerance; 1.5 points apart on another CPU type
    for r, earlier, cpu in zip(results, (0.60, 0.61 + 5e-7, 0.635), (zen4, zen4, xeon)):
        r["provenance"] = {"data": {"checksum": "a" * 64}}
        r["machine"] = zen4
        r["replaces"] = {"because": rp.reruns.UNCOMMITTED, "metrics": {**r["metrics"], "map@r": earlier},
                         "machine": cpu}
    line = rp.data_line(results)
    assert ("3 of them trained again from a committed checkout (`--verify-provenance`: the earlier run's "
            "checkout had uncommitted changes; 2 of them on the earlier run's CPU type): 1 gave bit-identical "
            "metrics, 1 every metric within 1e-06, 1 differ (MAP@R by 1.50 points, median; at most 1.50)") in line
    assert "--rerun-unrecorded" not in line  # none of them replaced a result without a checksum
    assert rp.gave_the_earlier_figures(results[1], rp.reruns.UNCOMMITTED)
    assert not rp.gave_the_earlier_figures(results[2], rp.reruns.UNCOMMITTED)
    assert not rp.gave_the_earlier_figures(results[0])  # replaced for another reason


def test_the_machines_line_counts_runs_by_cpu_type_and_those_that_recorded_no_generation(tmp_path):
    out = tmp_path / "out"
    _fake_results(out, "margin-dw-b80", [0.60, 0.61, 0.62, 0.63])
    results = rp.load_results(str(out), "margin-dw-b80")
    zen4 = "Linux x86_64, AMD EPYC (family 25 model 17, AVX-512, AVX2), 2 usable cores, load average 1.00, no GPU"
    for r, line in zip(results, (zen4, zen4, "Linux x86_64, AMD EPYC, 2 usable cores, load average 1.93, no GPU")):
        r["machine"] = line
    results[3].pop("machine", None)
    assert rp.machines_line(results) == (
        "Machines: 1 CPU type by the results' `machine`: AMD EPYC family 25 model 17 (2 runs); "
        "1 run recorded the model name alone (AMD EPYC), not its generation; 1 run recorded no machine.")
    assert rp.machines_line([]) == ""


def test_a_probe_of_runs_trained_again_since_is_wanted_again(tmp_path):
    out = tmp_path / "out"
    arm = rp.claim_arms("lu_topk")[0]
    _fake_results(out, arm, [0.60, 0.61], checksum="a" * 64)
    rp.mark_started(str(out), ["lu_topk"])
    results = rp.load_results(str(out), arm)
    for r in results:
        r["finished"] = f"2026-01-0{r['seed'] + 1}T00:00"
        (out / "arms" / arm / f"seed-{r['seed']}.json").write_text(json.dumps(r))
    (out / "probes").mkdir()
    probe = {"claim": "lu_topk", "test_classes": 2000, "ks": [1, 5], "scores": {arm: {"0": {}, "1": {}}},
             rp.PROBE_RUNS_KEY: {arm: {"0": "2026-01-01T00:00", "1": "2026-01-02T00:00"}}}
    (out / "probes" / "lu_topk-test2000.json").write_text(json.dumps(probe))
    (out / "probes" / "memory-some-arm.json").write_text(json.dumps({"arm": arm}))  # another script's probe
    assert rp.stale_probes(str(out)) == []
    assert "probe_reproduction" not in rp.wanted_text(str(out))
    results[1]["finished"] = "2026-02-01T00:00"  # seed 1 trained again
    (out / "arms" / arm / "seed-1.json").write_text(json.dumps(results[1]))
    assert rp.stale_probes(str(out)) == [("lu_topk", 2000, [1, 5], "1 of the 2 runs it scored were trained again since")]
    line = rp.wanted_text(str(out)).splitlines()[-2]
    assert line.startswith("python study/probe_reproduction.py --claim lu_topk --out ")
    assert " --test-classes 2000 --ks 1 5 " in line and "1 of the 2 runs" in line
    del probe[rp.PROBE_RUNS_KEY]  # a probe that records no runs cannot be tied to them
    (out / "probes" / "lu_topk-test2000.json").write_text(json.dumps(probe))
    assert "records no runs, so its 2 scores" in rp.stale_probes(str(out))[0][3]


def test_a_result_of_another_version_of_the_set_is_refused_before_training(kanji_dir, tmp_path):
    data = _versioned_copy(kanji_dir, tmp_path / "kanji", "a" * 64)
    out, arm, budget = tmp_path / "out", "margin-dw-b80", {"steps": 2, "evaluations": 1, "train_classes": 20,
                                                           "test_classes": 4}
    view = rp.view_of(arm, data, str(out), budget)
    config = rp.arm_config(arm, 0, view, budget, str(out / "arms" / arm / "seed-0"))
    stored = {"arm": arm, "seed": 0, "config_key": rp.config_key(config), "metrics": {"map@r": 0.5},
              "provenance": {"data": {"checksum": "c" * 64}}}
    (out / "arms" / arm).mkdir(parents=True)
    (out / "arms" / arm / "seed-0.json").write_text(json.dumps(stored))
    with pytest.raises(SystemExit, match="another version of the kanji set"):
        rp.run_arm(arm, 0, str(out), data, budget)
    stored["provenance"]["data"]["checksum"] = "a" * 64  # the same version: read back, not retrained
    (out / "arms" / arm / "seed-0.json").write_text(json.dumps(stored))
    assert rp.run_arm(arm, 0, str(out), data, budget)["metrics"] == {"map@r": 0.5}


def test_report_md_keeps_every_claim_with_results(tmp_path, capsys):
    """report.md once held only the claims of the last command: reporting lu_topk erased the
    wu_sampling report. It now holds every experiment started in the folder with results,
    whatever --claim says."""
    out = tmp_path / "out"
    _fake_results(out, "margin-dw-b80", [0.60, 0.61, 0.62])
    _fake_results(out, "precision_at_k-m10", [0.50, 0.51, 0.52])
    rp.mark_started(str(out), ["wu_sampling", "lu_topk", "hong_designs"])
    rp.main(["--claim", "lu_topk", "--report", "--out", str(out)])
    report = (out / "report.md").read_text()
    assert "### lu_topk" in report and "### wu_sampling" in report
    assert "### hong_designs" not in report  # started, no result yet
    # wu_beta shares margin-dw-b80 with wu_sampling but was not started here: not an experiment
    # of this folder, and its claim says so instead of judging the shared arm
    assert "### wu_beta" not in report
    assert "| **untested** | – | – | – | – | – | `--claim wu_beta` (not started in this folder) |" in report
    printed = capsys.readouterr().out
    assert "### lu_topk" in printed and "### wu_sampling" not in printed  # what was asked for


def test_report_md_opens_with_every_claim_and_the_total_cost(tmp_path):
    """The summary lists every claim, untested ones with their reason; the total counts a run two
    experiments share once: margin-dw-b80 is an arm of wu_sampling and of wu_beta."""
    out = tmp_path / "out"
    _fake_results(out, "margin-dw-b80", [0.60, 0.61, 0.62], seconds=600.0)
    for beta in (0.8, 1.0, 1.2, 1.4):
        _fake_results(out, f"margin-dw-b80-fixed{beta}", [0.40, 0.415, 0.42], seconds=120.0)
    _fake_results(out, "precision_at_k-m10", [0.50, 0.51, 0.52], seconds=60.0)
    rp.mark_started(str(out), ["wu_sampling", "wu_beta", "lu_topk"])
    rp.main(["--claim", "wu_beta", "--report", "--out", str(out)])
    report = (out / "report.md").read_text()
    head = report.split("### ")[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in head.splitlines() if line.startswith("| ")}
    assert set(rp.paper_claims.IDS) <= set(rows)
    assert ("| **reproduced** | 4 of 4 hold, 0 reversed | **reproduced** (R@1) | 4 of 4 hold, 0 reversed "
            "| **reproduced** | 4 of 4 hold, 0 reversed | `--claim wu_beta` |") in rows["wu_t3_f"]
    assert "**untested**" in rows["wu_t1_a"] and "arms or seeds missing" in rows["wu_t1_a"]
    assert "**untested**" in rows["hong_t2_t4"] and "needs the other methods' arms" in rows["hong_t2_t4"]
    assert rows["wu_beta"].endswith("| 15 | 54 |") and rows["lu_topk"].endswith("| 3 | 3 |")
    # distinct runs: 3 + 12 + 3 = 18 (not 21), 30 + 24 + 3 = 57 min
    assert "Total: 18 distinct runs (arm × seed), 0.9 hours of this machine, 2.0 min per run" in head
    assert report.index("## Summary") < report.index("### wu_sampling") < report.index("### wu_beta")


def test_report_command_rewrites_only_the_generated_block(tmp_path):
    out = tmp_path / "out"
    _fake_results(out, "precision_at_k-m10", [0.50, 0.55, 0.60])
    rp.mark_started(str(out), ["lu_topk"])
    results = tmp_path / "RESULTS.md"
    results.write_text(f"# R\n\n## Reproduction\n\n{rp.RESULTS_BEGIN}\nstale placeholder\n{rp.RESULTS_END}\n\nnotes by hand\n")
    assert rp.main(["report", "--out", str(out), "--results", str(results), "--check"]) == 1
    assert rp.main(["report", "--out", str(out), "--results", str(results)]) == 0
    text = results.read_text()
    assert text.startswith("# R\n\n## Reproduction\n\n") and text.endswith(f"{rp.RESULTS_END}\n\nnotes by hand\n")
    assert "stale placeholder" not in text and "| lu_t1 |" in text and "### lu_topk" in text
    assert rp.main(["report", "--out", str(out), "--results", str(results), "--check"]) == 0


def test_report_rewrites_the_figures_the_notes_quote_and_check_fails_when_one_is_stale(tmp_path):
    out = tmp_path / "standard"
    _fake_results(out, "precision_at_k-m10", [0.50, 0.55, 0.60])
    _fake_results(out, "triplet-dw-m10", [0.40, 0.44, 0.48])  # 10, 11, 12 points below: SE 0.577
    _fake_results(tmp_path / "wu_scratch", "triplet-dw-m10", [0.30, 0.30])
    rp.mark_started(str(out), ["lu_topk"])
    results = tmp_path / "RESULTS.md"
    notes = ("\n\nleads by <!-- fig: diff precision_at_k-m10 triplet-dw-m10 -->?<!-- /fig -->, at a quarter "
             "<!-- fig: gain precision_at_k-m10 triplet-dw-m10 at=0.25 -->?<!-- /fig -->, under wu_scratch "
             "<!-- fig: mean triplet-dw-m10 budget=wu_scratch -->?<!-- /fig -->\n")
    results.write_text(f"# R\n\n{rp.RESULTS_BEGIN}\n{rp.RESULTS_END}{notes}")
    assert rp.main(["report", "--out", str(out), "--results", str(results), "--check"]) == 1
    assert rp.main(["report", "--out", str(out), "--results", str(results)]) == 0
    text = results.read_text()
    # the fake curves rise linearly over 4 evaluations: a quarter of the way is a quarter of the final gap
    assert text.endswith("leads by <!-- fig: diff precision_at_k-m10 triplet-dw-m10 -->+11.0 ± 0.6<!-- /fig -->, "
                         "at a quarter <!-- fig: gain precision_at_k-m10 triplet-dw-m10 at=0.25 -->+2.8<!-- /fig -->, "
                         "under wu_scratch <!-- fig: mean triplet-dw-m10 budget=wu_scratch -->30.0<!-- /fig -->\n")
    assert rp.main(["report", "--out", str(out), "--results", str(results), "--check"]) == 0
    _fake_results(out, "triplet-dw-m10", [0.45, 0.44, 0.48])  # a rerun moves the figure: the note is stale
    assert rp.main(["report", "--out", str(out), "--results", str(results), "--check"]) == 1
    results.write_text(text.replace("diff precision_at_k-m10 triplet-dw-m10", "diff precision_at_k-m10 lu-none"))
    with pytest.raises(SystemExit, match="note figure 'diff precision_at_k-m10 lu-none': arm lu-none has no results"):
        rp.main(["report", "--out", str(out), "--results", str(results)])


def test_results_show_wu_s_protocol_beside_the_standard_budget(tmp_path):
    """The wu_scratch budget's results are reported next to the standard budget's: each claim it
    reran with both verdicts, its own setting (the best validation evaluation), cost and detail."""
    standard, scratch = tmp_path / "standard", tmp_path / "wu_scratch"
    learned = [0.60, 0.61, 0.62, 0.63, 0.64]
    _fake_results(standard, "margin-dw-b80", learned)
    _fake_results(scratch, "margin-dw-b80", learned, seconds=600.0)
    noise = [0.002, -0.001, 0.0, 0.001, -0.002]
    for beta, shift in ((0.8, 0.2), (1.0, 0.1), (1.2, 0.0), (1.4, 0.05)):
        _fake_results(standard, f"margin-dw-b80-fixed{beta}", [v - shift + e for v, e in zip(learned, noise)])
        _fake_results(scratch, f"margin-dw-b80-fixed{beta}", [v - 0.3 - 0.001 * i for i, v in enumerate(learned)],
                      seconds=600.0)
    config = {"model": {"backbone": "small_cnn", "embedding_dim": 128}, "optimizer": {"name": "adam",
              "learning_rate": 0.001}, "training": {"epochs": 24, "steps_per_epoch": 250},
              "data": {"validation": {"fraction": 0.2, "mode": "classes"}}}
    rp.mark_started(str(standard), ["wu_sampling", "wu_beta"])
    rp.mark_started(str(scratch), ["wu_beta"])
    first = scratch / "arms" / "margin-dw-b80" / "seed-0.json"
    first.write_text(json.dumps({**json.loads(first.read_text()), "config": config}))
    row = rp.paper_claims.by_id("wu_t3_f")
    assert rp.judge_claim(row, str(standard))["verdict"] == "partly"  # β0 = 1.2 level with the learned β
    assert rp.judge_claim(row, str(scratch))["verdict"] == "reproduced"
    assert rp.beside_outs(str(standard)) == [str(scratch)]
    block = rp.results_block(str(standard))
    summary_row = next(line for line in block.splitlines() if line.startswith("| wu_t3_f | Table 3 (f) "))
    assert "| **partly** | 3 of 4 hold, 0 reversed | **reproduced** | 4 of 4 hold, 0 reversed |" in summary_row, \
        summary_row
    assert "**Under `wu_scratch`** (Wu: SOP, from scratch, 100 epochs" in block
    assert "### wu_beta: Wu et al. 2017, Table 3" in block and "### wu_beta: Wu et al. 2017, Table 3 (SOP, " \
        "pre-trained, 8k iterations, R@1 %) — budget `wu_scratch`" in block
    detail = block.split("### The experiments under `wu_scratch`", 1)[1]
    assert "500 training classes, 20% of them held out as a validation split" in detail
    # no experiment of that folder trains longer than its budget (wu_margin_budget is not one)
    assert "**6,000 steps** per run, 24 evaluations" in detail
    assert "Protocol: Wu: SOP, from scratch, 100 epochs" in detail and "2,000 steps" not in detail
    assert "Total: 25 distinct runs (arm × seed), 4.2 hours" in block  # the wu_scratch runs' cost
    # both budgets' runs: 25 of 60 s and 25 of 600 s
    assert "The whole study: 50 runs, 4.6 hours of this machine (`standard` 25 runs, 0.4 h, `wu_scratch` 25 runs, " \
        "4.2 h)." in block
    # the standard budget's own detail keeps the claim's protocol line
    assert "Protocol: Wu: SOP, ImageNet-pretrained, 8k iterations; here: from scratch, 2,000 steps" in \
        rp.report("wu_beta", str(standard), draw=False)


def test_report_block_is_generated_from_the_committed_results():
    """The report's verdicts are the verdict function's on the committed JSON: none can say more."""
    assert rp.write_results(os.path.join(ROOT, "study", "results", "standard"), check=True), \
        "study/REPORT.md is stale: run python study/reproduce.py report"


def _names_an_absolute_path(value):
    if isinstance(value, dict):
        return any(_names_an_absolute_path(v) for v in value.values())
    if isinstance(value, list):
        return any(_names_an_absolute_path(v) for v in value)
    return isinstance(value, str) and (value.startswith("/") or value[1:3] == ":\\")


def test_no_absolute_paths_under_study_and_benchmarks():
    """Committed configs and results under study/ and benchmarks/ name no folder of one machine: results
    write ``$OUT``, configs relative paths. (Run folders and views are git-ignored.)"""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "study", "benchmarks"],
                            cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the committed files are not known")
    offenders = []
    for rel in listed.stdout.splitlines():
        path = os.path.join(ROOT, rel)
        if not os.path.exists(path):
            continue
        if rel.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                bad = _names_an_absolute_path(json.load(f))
        elif rel.endswith((".py", ".md", ".yaml", ".yml", ".cfg", ".toml")):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            bad = any(prefix in text for prefix in ("/work/", "/home/", "/root/", "/Users/"))
        else:
            continue
        if bad:
            offenders.append(rel)
    assert not offenders, f"absolute paths in {offenders[:5]} ({len(offenders)} files)"


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


def test_proxy_nca_is_compared_with_precision_at_k_on_the_same_fewer_training_classes(kanji_dir, tmp_path):
    """Lu Table 1's Proxy NCA check: both arms on 100 training classes and the budget's test classes;
    the ℓ_k arm of that check differs from the other checks' ℓ_k arm in the view only."""
    row = rp.paper_claims.by_id("lu_t1_losses")
    assert ("precision_at_k-m10-c100", "proxy_nca-m10-c100") in row["checks"]
    assert all("c100" not in arm for check in row["checks"][:-1] for arm in check)
    budget = dict(rp.BUDGETS["quick"], train_classes=None, test_classes=3)
    fewer, every = (rp.view_of(arm, kanji_dir, str(tmp_path), budget)
                    for arm in ("precision_at_k-m10-c100", "precision_at_k-m10"))
    assert os.path.basename(fewer) == "view-train100-test3.npz" and os.path.basename(every) == "view-trainall-test3.npz"
    assert rp.view_of("proxy_nca-m10-c100", kanji_dir, str(tmp_path), budget) == fewer
    cfg = lambda arm, view: rp.arm_config(arm, 0, view, rp.BUDGETS["standard"], "out")  # noqa: E731
    assert cfg("precision_at_k-m10-c100", "v.npz") == cfg("precision_at_k-m10", "v.npz")
    assert rp.VIEW_KEY not in cfg("proxy_nca-m10-c100", "v.npz")


def test_loss_table_arms_take_each_loss_from_its_papers_config_and_build(tmp_path):
    """Wu Table 4's and Lu Table 1's other losses: the loss section of the committed config of the
    loss's paper (one source of truth), at the claim's design, and the loss builds."""
    import yaml

    from tfdml_app import config as config_lib

    arms = {arm for claim in ("wu_losses", "lu_losses") for arm in rp.claim_arms(claim)}
    assert {"histogram-b80", "binomial_deviance-b80", "lifted_structured-b80", "npair-b80", "lifted_structured-m10",
            "npair-m10", "angular-m10", "proxy_nca-m10-c100", "contrastive-all-m10"} <= arms
    for arm in sorted(arms):
        name = arm.removesuffix("-c100").rsplit("-", 1)[0]
        if name in rp.LOSS_TABLE_CONFIGS:
            with open(os.path.join(ROOT, "configs", rp.LOSS_TABLE_CONFIGS[name] + ".yaml")) as f:
                paper = yaml.safe_load(f)
            assert rp.ARMS[arm]["loss"] == paper["loss"]
            ran_with = rp.RUN_WITH.get(name, {}).get("model", {})  # the setting its results were trained with
            assert rp.ARMS[arm]["model"]["normalize"] == ran_with.get("normalize", paper["model"]["normalize"])
        design = rp.ARMS[arm]["design"]
        if arm.endswith("-m10") or arm.endswith("-m10-c100"):
            assert design == rp.ARMS["precision_at_k-m10"]["design"]
        elif arm != "npair-b80":
            assert design == rp.ARMS["margin-dw-b80"]["design"]
        else:
            options = design["options"]
            assert options["m"] * options["n"] == 80 and options["m"] == 2  # Sohn's N pairs
        cfg = tfdml_config.validate(rp.arm_config(arm, 0, str(tmp_path / "view.npz"), rp.BUDGETS["standard"],
                                                  str(tmp_path / arm)))
        assert config_lib.build_loss(cfg, 20) is not None


def test_a_budget_with_a_validation_split_keeps_the_best_evaluation(kanji_dir, tmp_path):
    """Wu's protocol (the wu_scratch budget): training classes held out for validation, the
    best evaluation by validation MAP@R kept and the test split scored once on it; the curves
    (and checks at a fraction of the budget) read the validation figures."""
    budget = rp.BUDGETS["wu_scratch"]
    assert budget["validation"] and budget["train_classes"] == 500
    assert rp.arm_config("margin-dw-b80", 0, "v.npz", budget, "out")["data"]["validation"] == {
        "fraction": budget["validation"], "mode": "classes"}
    assert "validation" not in rp.arm_config("margin-dw-b80", 0, "v.npz", rp.BUDGETS["standard"], "out")["data"]
    data = tmp_path / "kanji"
    shutil.copytree(kanji_dir, data)
    out = tmp_path / "out"
    argv = ["--claim", "wu_beta", "--seeds", "0", "--data", str(data), "--out", str(out), "--budget", "wu_scratch",
            "--steps", "3", "--train-classes", "20", "--test-classes", "4"]
    original = rp.claim_arms
    rp.claim_arms = lambda claim: [a for a in original(claim) if a == "margin-dw-b80"]
    try:
        assert rp.main(argv) == 0
    finally:
        rp.claim_arms = original
    result = json.loads((out / "arms" / "margin-dw-b80" / "seed-0.json").read_text())
    assert result["config"]["data"]["validation"]["fraction"] == budget["validation"]
    history = result["history"]
    assert len(history) == 3 and all("val_map@r" in row and "test_map@r" not in row for row in history)
    best = max(range(3), key=lambda i: history[i]["val_map@r"])
    assert result["kept"]["epoch"] == best + 1 and "val_map@r" in json.dumps(result["kept"])
    assert rp._metric(result, "map@r", at=1 / 3) == history[0]["val_map@r"]
    assert 0.0 <= result["metrics"]["map@r"] <= 1.0


def test_hong_fig1_arms_perturb_only_the_weights():
    """Fig. 1: the IS arm of each design with W^δ; δ = 0 and 1 are the existing no-IS and IS arms."""
    checks = rp.paper_claims.by_id("hong_fig1")["checks"]
    assert len(checks) == 8 and all(better.endswith("-is") for better, _ in checks)
    for design in ("4x16", "32x2"):
        base = rp.ARMS[f"balanced-group{design}-is"]
        for delta in rp.HONG_DELTAS:
            arm = rp.ARMS[f"balanced-group{design}-is-delta{delta}"]
            assert arm["loss"]["options"].pop("importance_power") == delta
            assert arm == base


def test_duan_paper_setting_compares_the_pool_arms_at_equal_tuples():
    learned, random_arm = rp.ARMS["triplet-learned-pool320-pretrain200"], rp.ARMS["triplet-random-pool320-t64"]
    design = learned["design"]["options"]
    assert learned["design"] == random_arm["design"] and design["m"] * design["n"] == 320
    options = learned["learned_sampler"]
    assert options["pretrain_steps"] > 0
    assert options["trunk"] == "conv"  # §3.2: a conv network on the images
    assert random_arm["loss"]["sampler_options"]["num_triplets"] == options["minibatches"] * options[
        "tuples_per_minibatch"]
    assert learned["loss"]["options"] == random_arm["loss"]["options"]
    # The pool against the batch: the same policy (conv, pre-trained), only the design differs.
    pool_check = rp.paper_claims.by_id("duan_paper_setting")["checks"][1]
    batch_arm = rp.ARMS[pool_check[1]]
    assert pool_check[0] == "triplet-learned-pool320-pretrain200"
    assert batch_arm["loss"] == learned["loss"] and batch_arm["design"] != learned["design"]
    assert batch_arm["learned_sampler"] == learned["learned_sampler"]
    # The arms not run yet record whether the policy collapses (its entropy, the loss of the
    # tuples it picks against uniform ones); the arms already run keep their config.
    for arm in ("triplet-learned-pool320-pretrain200", "triplet-learned-b80-pretrain200-conv", "npair-learned-m4"):
        assert rp.ARMS[arm]["learned_sampler"]["diagnostics"] is True, arm
    for arm in ("triplet-learned-b80", "triplet-learned-b80-pretrain200", "triplet-learned-b80-t20"):
        assert "diagnostics" not in rp.ARMS[arm]["learned_sampler"], arm


def test_the_report_says_whether_a_learned_policy_collapsed(tmp_path):
    """Arms whose runs recorded tfdml.dsn's diagnostics get a table: per arm, the seeds' means of
    the first and the last epoch's policy entropy, the uniform policy's entropy, and the picked
    tuples' loss over the uniform ones'; arms without them (random triplets) get no row."""
    out = tmp_path / "out"
    arm = "triplet-learned-pool320-pretrain200"
    _fake_results(out, arm, [0.50, 0.52])
    _fake_results(out, "triplet-random-pool320-t64", [0.49, 0.51])
    values = {0: [(6.9, 7.0, 0.30, 0.20), (2.0, 7.0, 0.12, 0.10)], 1: [(6.7, 7.0, 0.30, 0.30), (1.0, 7.0, 0.30, 0.20)]}
    for seed, (first, last) in values.items():
        path = out / "arms" / arm / f"seed-{seed}.json"
        result = json.loads(path.read_text())
        for row, diagnosed in ((result["history"][0], first), (result["history"][-1], last)):
            row.update(zip(("dsn_entropy", "dsn_uniform_entropy", "dsn_picked_loss", "dsn_uniform_loss"), diagnosed))
        for row in result["history"][1:-1]:
            row.update(dsn_entropy=5.0, dsn_uniform_entropy=7.0, dsn_picked_loss=0.2, dsn_uniform_loss=0.2)
        path.write_text(json.dumps(result))
    text = rp.report("duan_paper_setting", str(out), draw=False)
    rows = [line for line in text.splitlines() if line.startswith("| triplet-") and "→" in line]
    # entropy (6.9 + 6.7) / 2 → (2.0 + 1.0) / 2; picked / uniform (1.5 + 1.0) / 2 → (1.2 + 1.5) / 2
    assert rows == [f"| {arm} | 2 | 6.80 → 1.50 | 7.00 | 1.25 → 1.35 |"]
    assert rp.policy_diagnostics("wu_sampling", str(out)) == []


def test_the_runner_refuses_a_checkout_with_uncommitted_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(rp, "uncommitted_changes", lambda: ["tfdml/losses/base.py"])
    monkeypatch.setattr(rp, "kanji_set", lambda data: pytest.fail("the refusal comes before any data or training"))
    with pytest.raises(SystemExit) as refused:
        rp.main(["--claim", "wu_beta", "--seeds", "0", "--out", str(tmp_path / "out")])
    assert "uncommitted changes (tfdml/losses/base.py)" in str(refused.value)
    assert "Commit or stash them" in str(refused.value)
    assert not (tmp_path / "out" / "arms").exists()
    assert rp.main(["--claim", "wu_beta", "--report", "--out", str(tmp_path / "out")]) == 0  # writes no result


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=cwd, check=True,
                   capture_output=True)


def test_uncommitted_changes_are_those_of_code_not_of_results(tmp_path, monkeypatch):
    """Changed, staged and new files count; the results and reports the runner writes do not."""
    monkeypatch.setattr(rp, "uncommitted_changes", UNCOMMITTED_CHANGES)
    monkeypatch.setattr(rp, "ROOT", str(tmp_path))
    assert rp.uncommitted_changes() is None and rp.git_commit() is None  # not a git checkout
    (tmp_path / "study" / "results" / "standard").mkdir(parents=True)
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "study" / "REPORT.md").write_text("report\n")
    (tmp_path / "study" / "results" / "standard" / "report.md").write_text("report\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "start")
    assert rp.uncommitted_changes() == [] and not rp.git_commit().endswith("+dirty")
    (tmp_path / "study" / "REPORT.md").write_text("rewritten\n")
    (tmp_path / "study" / "results" / "standard" / "report.md").write_text("rewritten\n")
    (tmp_path / "study" / "results" / "standard" / "seed-0.json").write_text("{}\n")
    assert rp.uncommitted_changes() == []
    (tmp_path / "code.py").write_text("x = 2\n")
    (tmp_path / "new.py").write_text("y = 1\n")
    assert sorted(rp.uncommitted_changes()) == ["code.py", "new.py"] and rp.git_commit().endswith("+dirty")
    _git(tmp_path, "add", "code.py")
    (tmp_path / "new.py").unlink()
    assert rp.uncommitted_changes() == ["code.py"]  # staged is not committed


def test_a_claim_is_judged_on_the_paper_s_metric_and_with_holm_per_paper_beside_map_r(tmp_path, monkeypatch):
    """wu_t3_f: the learned β beats every fixed β0 on MAP@R; on R@1 (Wu's metric) β0 = 1.2 beats it.
    The table and the claim's detail show both verdicts, and the per-paper one is judge_together's
    on the checks of every Wu claim started in the folder."""
    out = tmp_path / "out"
    _fake_results(out, "margin-dw-b80", [0.60, 0.61, 0.62])
    for beta in (0.8, 1.0, 1.2, 1.4):
        _fake_results(out, f"margin-dw-b80-fixed{beta}", [0.40, 0.415, 0.42])
    path = out / "arms" / "margin-dw-b80-fixed1.2"
    for seed, value in enumerate([0.70, 0.71, 0.72]):  # R@1 only: MAP@R stays below the learned β
        result = json.loads((path / f"seed-{seed}.json").read_text())
        result["metrics"]["recall@1"] = value
        (path / f"seed-{seed}.json").write_text(json.dumps(result))
    rp.mark_started(str(out), ["wu_beta"])
    row = next(r for r in rp.paper_claims.CLAIMS if r["id"] == "wu_t3_f")
    assert rp.paper_metric(row) == "recall@1"
    families = []
    judge_together = rp.verdicts.judge_together
    monkeypatch.setattr(rp.verdicts, "judge_together", lambda groups: families.append(groups) or judge_together(groups))
    line = next(line for line in rp.claims_table(str(out)).splitlines() if line.startswith("| wu_t3_f |"))
    assert ("| **reproduced** | 4 of 4 hold, 0 reversed | **contradicted** (R@1) | 3 of 4 hold, 1 reversed "
            "| **reproduced** | 4 of 4 hold, 0 reversed |") in line
    assert [len(group) for group in families[0]] == [4]  # the one Wu claim started here, its 4 checks
    detail = rp.claim_detail(row, str(out))
    assert "on the paper's metric, R@1: **contradicted** (3 of 4 hold, 1 reversed)" in detail
    assert "with Holm's correction across every check of Wu et al. 2017 judged here: **reproduced**" in detail
    lu = next(r for r in rp.paper_claims.CLAIMS if r["id"] == "lu_t1")
    hong_objective = next(r for r in rp.paper_claims.CLAIMS if r["id"] == "hong_objective_lower")
    assert rp.paper_metric(lu) == "precision@5" and rp.paper_metric(hong_objective) is None


def test_a_check_at_different_tuple_counts_or_with_another_sampler_says_so():
    """duan_t3_semi compares 64 learned tuples with semi-hard's 320, and the pair losses'
    semi-hard arms bound negatives by D_ap where Wu use a fixed bound: their rows carry a caveat,
    shown in the claims table and the claim's detail."""
    semi = rp.paper_claims.by_id("duan_t3_semi")
    assert "64" in semi["caveat"] and "320" in semi["caveat"]
    learned, semi_hard = semi["checks"][0]
    options = rp.ARMS[learned]["learned_sampler"]
    assert options["minibatches"] * options["tuples_per_minibatch"] == 64
    for row in rp.paper_claims.CLAIMS:
        pair_semi_hard = [arm for check in row.get("checks", []) for arm in rp.paper_claims.sides(check)
                          if arm.startswith(("contrastive-semi_hard", "margin-semi_hard"))]
        if pair_semi_hard and not rp.is_investigation(row):
            assert "semi_hard.py" in row.get("caveat", ""), row["id"]
    table = rp.claims_table("/nonexistent")
    assert "caveat: a check at different tuple counts" in next(line for line in table.splitlines()
                                                               if line.startswith("| duan_t3_semi |"))


def test_the_rule_counts_the_checks_that_pair_different_designs_or_views(tmp_path):
    """The same seed gives two arms the same batches only with the same design and view: the rule
    counts the checks that pair different ones, and a claim's detail names them."""
    import pairing

    assert pairing.pairs_different_settings(("balanced-group2x32-nois", "balanced-group32x2-nois"), rp.ARMS,
                                            rp.VIEW_KEY)
    assert pairing.pairs_different_settings(("balanced-group4x16-is", "balanced-group4x16-imbalance0.9-is"),
                                            rp.ARMS, rp.VIEW_KEY)
    assert not pairing.pairs_different_settings(("balanced-group4x16-is", "balanced-group4x16-nois"), rp.ARMS,
                                                rp.VIEW_KEY)
    different, checks = pairing.count_different_settings(rp.ARMS, rp.VIEW_KEY)
    assert 0 < different < checks
    assert f"{different} of {checks} checks pair arms of different designs or views" in rp.rule_text()
    out = tmp_path / "out"
    for arm, finals in (("balanced-group4x16-is", [0.6, 0.62, 0.61]),
                        ("balanced-group4x16-imbalance0.9-is", [0.5, 0.52, 0.5]),
                        ("balanced-group4x16-nois", [0.6, 0.6, 0.6]),
                        ("balanced-group4x16-imbalance0.9-nois", [0.5, 0.5, 0.5])):
        _fake_results(out, arm, finals)
    detail = rp.claim_detail(rp.paper_claims.by_id("hong_fig3_falls"), str(out))
    assert "Paired by seed number alone" in detail
    assert "balanced-group4x16-is > balanced-group4x16-imbalance0.9-is" in detail


def test_the_report_gives_each_seed_s_policy_entropy_against_its_outcome(tmp_path):
    """Per seed of an arm with tfdml.dsn diagnostics: the last epoch's entropy, the picked over
    uniform tuples' loss, the run's MAP@R and that seed's difference in each check of the arm."""
    out = tmp_path / "out"
    arm, other = "triplet-learned-pool320-pretrain200", "triplet-random-pool320-t64"
    _fake_results(out, arm, [0.60, 0.40])
    _fake_results(out, other, [0.55, 0.50])
    for seed, (entropy, picked) in enumerate([(0.9, 0.4), (0.01, 0.1)]):
        path = out / "arms" / arm / f"seed-{seed}.json"
        result = json.loads(path.read_text())
        for row in result["history"]:
            row.update(dsn_entropy=entropy, dsn_uniform_entropy=7.0, dsn_picked_loss=picked, dsn_uniform_loss=0.2)
        path.write_text(json.dumps(result))
    lines = rp.policy_per_seed("duan_paper_setting", str(out))
    rows = [line for line in lines if line.startswith(f"| {arm} |")]
    assert rows == [f"| {arm} | 0 | 0.90 | 2.00 | 60.0 | +5.0 against {other} |",
                    f"| {arm} | 1 | 0.01 | 0.50 | 40.0 | -10.0 against {other} |"]


def test_the_claims_table_lists_the_figures_that_state_no_claim():
    """Every seed paper's figures and tables are a row or an illustration named in the report."""
    line = rp.illustrations_line()
    for paper, where, _ in rp.paper_claims.ILLUSTRATIONS:
        assert f"{paper} {where}" in line
    assert {paper for paper, _, _ in rp.paper_claims.ILLUSTRATIONS} == {
        rp.paper_claims.WU, rp.paper_claims.HONG, rp.paper_claims.LU, rp.paper_claims.DUAN, rp.paper_claims.DRAFT}


def test_wanted_lists_one_seed_of_each_arm_trained_only_from_uncommitted_code(tmp_path):
    """An arm whose results record a ``+dirty`` commit and none of whose seeds was trained again
    from a committed checkout is wanted once: its cheapest such seed, with --verify-provenance.
    One seed trained again (``replaces.because`` the uncommitted code) settles the arm."""
    out = tmp_path / "out"
    _fake_results(out, "margin-dw-b80", [0.60, 0.61, 0.62], seconds=120.0)
    _fake_results(out, "margin-dw-b80-fixed1.2", [0.50, 0.51, 0.52], seconds=120.0)
    rp.mark_started(str(out), ["wu_beta"])
    paths = sorted((out / "arms" / "margin-dw-b80").glob("seed-*.json"))
    for seconds, path in zip((300.0, 90.0, 200.0), paths):
        result = json.loads(path.read_text())
        result.update(seconds=seconds, provenance={"git_commit": "abc123+dirty", "data": {"checksum": "a" * 64}})
        path.write_text(json.dumps(result))
    assert rp.unverified_arms(str(out)) == {"wu_beta": [("margin-dw-b80", 1)]}
    assert (f"python study/reproduce.py --claim wu_beta --out {out} --arm margin-dw-b80 --seeds 1 "
            "--verify-provenance") in rp.wanted_text(str(out))
    # seed 1 trained again from a committed checkout: the arm is settled
    result = json.loads(paths[1].read_text())
    result.update(provenance={"git_commit": "def456", "data": {"checksum": "a" * 64}},
                  replaces={"because": "uncommitted code", "provenance": {"git_commit": "abc123+dirty"}})
    paths[1].write_text(json.dumps(result))
    assert rp.unverified_arms(str(out)) == {}
    assert "--verify-provenance" not in rp.wanted_text(str(out))


@pytest.mark.parametrize("folder", ["standard", "wu_scratch"])
def test_every_stored_result_was_trained_with_its_arm_s_current_config(folder):
    """A result counts for its arm only if the arm still builds the config it was trained with
    (the same config key): a shipped config that an arm reads and that changed since, or an
    option respelt, must show here rather than when the next run stops on it."""
    import glob

    # A fresh copy of the module: other tests of this file change the shared ARMS in place.
    spec = importlib.util.spec_from_file_location("reproduce_fresh", os.path.join(ROOT, "study", "reproduce.py"))
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    stale = []
    for path in sorted(glob.glob(os.path.join(ROOT, "study", "results", folder, "arms", "*", "seed-*.json"))):
        with open(path, encoding="utf-8") as fh:
            stored = json.load(fh)
        arm = stored["arm"]
        if arm not in fresh.ARMS:
            continue
        now = fresh.arm_config(arm, stored["seed"], stored["config"]["data"]["options"]["path"],
                               fresh.BUDGETS[folder], stored["config"]["output_dir"])
        if fresh.config_key(now) != stored["config_key"]:
            stale.append(os.path.relpath(path, ROOT))
    assert not stale, f"results trained with another config than their arm's current one: {stale}"
