"""The arms of the seed tables' comparison systems (study/seed_tables.py): each takes its loss
from its shipped config and the rest from the arm it is compared with, and the claims that
read them sit in the claims table after the rows they follow."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("reproduce", os.path.join(ROOT, "study", "reproduce.py"))
rp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rp)
tables = rp.seed_tables

SYSTEM_ARMS = ("facility_location-b80", "ddml-b80", "pddm-b80", "pddm-triplet-b80", "daml-b80",
               "facility_location-group4x16", "triplet-npair-b80", "triplet-smart_mining-t26", "hdc-b80")


def _without(spec, *keys):
    return {key: value for key, value in spec.items() if key not in keys}


def test_the_systems_arms_are_new_names_beside_the_other_arms():
    others = {arm: spec for arm, spec in rp.ARMS.items() if arm not in SYSTEM_ARMS}
    made = tables.arms(others)
    assert set(made) == set(SYSTEM_ARMS) and not set(made) & set(others)
    assert {arm: rp.ARMS[arm] for arm in made} == made


def test_each_loss_is_its_shipped_config_s():
    for arm, system in (("facility_location-b80", "facility_location"), ("ddml-b80", "ddml"), ("pddm-b80", "pddm"),
                        ("daml-b80", "daml"), ("facility_location-group4x16", "facility_location")):
        shipped = rp._paper_config(tables.SYSTEM_CONFIGS[system])
        assert rp.ARMS[arm]["loss"] == shipped["loss"], arm
        assert rp.ARMS[arm]["model"] == shipped["model"], arm
    assert rp.ARMS["pddm-triplet-b80"]["loss"]["options"] == {**rp.ARMS["pddm-b80"]["loss"]["options"],
                                                               "variant": "triplet"}
    assert rp.ARMS["triplet-npair-b80"]["loss"]["sampler"] == "npair"
    smart = rp.ARMS["triplet-smart_mining-t26"]["design"]
    assert smart["name"] == "smart_mining" and smart["options"]["n"] == tables.SMART_MINING_TRIPLETS


def test_a_system_arm_differs_from_the_arm_it_meets_in_the_system_alone():
    for arm in ("facility_location-b80", "ddml-b80", "pddm-b80", "daml-b80"):
        assert rp.ARMS[arm]["design"] == rp.ARMS["margin-dw-b80"]["design"], arm  # Wu's batch 80: 16 × 5
    # Hong's tables: the balanced arm's design and schedule, another loss
    assert (_without(rp.ARMS["facility_location-group4x16"], "loss", "model")
            == _without(rp.ARMS["balanced-group4x16-is"], "loss"))
    # Duan's Table 3: the learned arm's triplet loss, another sampling
    learned = rp.ARMS["triplet-learned-b80"]["loss"]
    for arm in ("triplet-npair-b80", "triplet-smart_mining-t26"):
        loss = rp.ARMS[arm]["loss"]
        assert (loss["name"], loss["options"]) == (learned["name"], learned["options"]), arm
    assert rp.ARMS["triplet-npair-b80"]["design"] == rp.ARMS["npair-b80"]["design"]  # 40 classes × 2


def test_every_check_of_the_tables_claims_reads_arms_of_its_experiment():
    rows = [row for placed in tables.CLAIMS_AFTER.values() for row in placed]
    ids = rp.paper_claims.IDS
    for anchor, placed in tables.CLAIMS_AFTER.items():
        at = ids.index(anchor)
        assert ids[at + 1:at + 1 + len(placed)] == [row["id"] for row in placed]
    for row in rows:
        if row.get("untested"):
            continue
        assert row["experiment"] in tables.EXPERIMENTS
        for check in row["checks"]:
            assert set(rp.paper_claims.sides(check)) <= set(rp.claim_arms(row["experiment"])), (row["id"], check)
    duan = rp.paper_claims.by_id("duan_t3_others")
    assert duan["checks"] == [("triplet-learned-b80", "triplet-npair-b80"),
                              ("triplet-learned-b80", "triplet-smart_mining-t26")]


def test_hdc_arm_is_the_shipped_cascade_beside_the_margin_arm():
    """hdc-b80 trains configs/yuan_hdc.yaml's cascade and loss on margin-dw-b80's design, and
    wu_t4_t6_hdc compares the two."""
    arm = rp.ARMS["hdc-b80"]
    shipped = tables.shipped_config("yuan_hdc")
    assert arm["loss"] == shipped["loss"]
    assert arm["model"]["cascade"] == shipped["model"]["cascade"]
    assert arm["model"]["embedding_dim"] % shipped["model"]["cascade"]["levels"] == 0
    assert arm["design"] == rp.ARMS["margin-dw-b80"]["design"]
    assert rp.paper_claims.by_id("wu_t4_t6_hdc")["checks"] == [("margin-dw-b80", "hdc-b80")]
