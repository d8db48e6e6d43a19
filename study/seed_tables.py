"""The comparison systems of the seed papers' tables in the reproduction study: the arms of
the systems those tables list beside the papers' own methods (the facility-location clustering
loss, DDML, PDDM, DAML, and N-pair sampling and smart mining for the triplet loss), each built
from its shipped config (``configs/``), and the claims of the tables that read them (Wu et al.
Tables 4–6, the draft's Tables 5 and 7, Hong et al. Tables 2–4, Duan et al. Tables 1–3).

An arm takes its loss section from the system's config and its batch design (and, in Hong's
setting, the learning-rate schedule) from the arm it is compared with, so that a check's arms
differ in the system alone where the designs allow it. :func:`arms` builds them from the
study's other arms; :data:`EXPERIMENTS` are the experiments (``reproduce.py --claim``) that
train them; :data:`CLAIMS_AFTER` places each claim row in the claims table after the row it
follows (:mod:`reproduction_claims`).
"""

from arm_parts import design, merge, paper_config, shipped_config
from papers import DRAFT, DUAN, HONG, WU

#: The shipped config of each system (``configs/<name>.yaml``).
SYSTEM_CONFIGS = {"facility_location": "song_facility_location", "ddml": "ddml", "pddm": "huang_pddm",
                  "daml": "daml", "npair_sampling": "duan_npair_triplet", "smart_mining": "harwood_smart_mining",
                  "hdc": "yuan_hdc"}

#: Triplets per batch of the smart-mining arm: 26 (anchor, positive, negative) rows, 78 images,
#: the nearest to the other triplet arms' batch of 80.
SMART_MINING_TRIPLETS = 26


def arms(others):
    """The systems' arms, built beside ``others`` (the study's other arms, by name)."""
    section = {name: paper_config(config) for name, config in SYSTEM_CONFIGS.items()
               if name not in ("npair_sampling", "smart_mining")}
    batch80 = design(5, 16)  # Wu's batch 80 (16 classes × 5), as margin-dw-b80 and the loss-table arms
    # Duan's triplet loss as the learned and semi-hard arms score it (margin 0.2, ℓ2), so that
    # Table 3's arms differ in the sampling alone.
    duan_triplet = {"loss": others["triplet-learned-b80"]["loss"]}
    npair_sampler = shipped_config(SYSTEM_CONFIGS["npair_sampling"])["loss"]["sampler"]
    smart = shipped_config(SYSTEM_CONFIGS["smart_mining"])["design"]
    hong = {key: value for key, value in others["balanced-group4x16-is"].items() if key != "loss"}
    hdc_model = shipped_config(SYSTEM_CONFIGS["hdc"])["model"]  # the cascade and its embedding size
    cascade = {"model": {"cascade": hdc_model["cascade"], "embedding_dim": hdc_model["embedding_dim"]}}
    return {
        "facility_location-b80": merge(batch80, section["facility_location"]),
        "ddml-b80": merge(batch80, section["ddml"]),
        "pddm-b80": merge(batch80, section["pddm"]),
        "pddm-triplet-b80": merge(batch80, section["pddm"], {"loss": {"options": {"variant": "triplet"}}}),
        "daml-b80": merge(batch80, section["daml"]),
        "hdc-b80": merge(batch80, section["hdc"], cascade),
        # Hong's Tables 2–4: the clustering loss on the balanced arm's design and schedule.
        "facility_location-group4x16": merge(hong, section["facility_location"]),
        # Duan's Table 3: N-pair sampling on an N-pair batch (40 classes × 2: N = 40),
        # smart mining (FANNG's role) with the shipped config's options.
        "triplet-npair-b80": merge(design(2, 40), duan_triplet, {"loss": {"sampler": npair_sampler}}),
        "triplet-smart_mining-t26": merge(
            {"design": merge(smart, {"options": {"n": SMART_MINING_TRIPLETS}})}, duan_triplet),
    }


EXPERIMENTS = {
    "wu_tables": {
        "source": "Wu et al. 2017, Tables 4–6, and the draft's Tables 5 and 7: the other systems (SOP, R@1 % of "
                  "Wu's Table 4; PDDM has no SOP row)",
        "metric": "recall@1",
        "paper": {"facility_location-b80": 67.0, "hdc-b80": 69.5, "margin-dw-b80": 72.7},
    },
    "hong_tables": {
        "source": "Hong et al., Tables 2–4: the Cluster rows (CUB200, R@1 %)",
        "metric": "recall@1",
        "paper": {"facility_location-group4x16": 51.40, "balanced-group4x16-is": 54.22},
    },
    "duan_tables": {
        "source": "Duan et al. 2019, Tables 1 and 3 (Cars196, R@1 %)",
        "metric": "recall@1",
        "paper": {"ddml-b80": 32.7, "lifted_structured-b80": 59.9, "facility_location-b80": 58.1, "daml-b80": 75.1,
                  "triplet-random-b80-t64": 45.1, "triplet-semi_hard-b80": 52.4, "triplet-learned-b80": 59.3,
                  "npair-m4": 68.9, "npair-learned-m4": 72.9, "triplet-npair-b80": 46.3,
                  "triplet-smart_mining-t26": 58.2},
    },
}

_HERE_B80 = ("here: from scratch, 2,000 steps, about 1 epoch of the kanji set, the final step, every system at batch "
             "80 (16 classes × 5) with its config's hyper-parameters (configs/)")

_WU_TABLES = ("Wu: SOP, CARS196 and CUB200, ImageNet-pretrained (§5.2), the other systems' published figures; "
              + _HERE_B80)

_DRAFT_METHOD = ("the draft does not say which loss its tables ran; its thesis (draft_thesis) is the contrastive "
                 "loss with the right sampling, so its method is read here as contrastive + distance weighted "
                 "sampling (contrastive-dw-b80)")

_PDDM = ("the PDDM arms take configs/huang_pddm.yaml's options (margins α = β = 0.5, λ = 1, PDDMLoss's defaults); "
         "the kanji images have no cropped view, the setting of the PDDM rows")

_DUAN_TABLES = ("Duan: pretrained GoogLeNet, 512-d embeddings, batch 120, the other methods as published; here: "
                "from scratch, 2,000 steps, DE-DSP (N-pair) and N-pair as duan_npair (20 classes × 4), the other "
                "methods at batch 80 (16 classes × 5) with their configs' hyper-parameters (configs/)")

_DUAN_T3 = ("as duan_t3_semi: Duan's triplet loss (margin 0.2, ℓ2) on every arm; N-pair sampling: 40 classes × 2 "
            "images, every triplet (x_i, x_i+, x_j+) of the batch (the npair sampler of "
            "configs/duan_npair_triplet.yaml); smart mining: configs/harwood_smart_mining.yaml's design (k = 10 "
            "neighbours, hard fraction 0.5 moved by 0.05 after each epoch, the table rebuilt every epoch, here every "
            "250 steps) with 26 triplets a batch")

_FANNG = ("FANNG's row is smart mining (Harwood et al. 2017, the mining FANNG serves) with an exact "
          "nearest-neighbour search in place of FANNG's approximate graph; the arms differ in tuples a step: 64 "
          "learned, 1,560 of N-pair sampling (40 × 39), 320 of semi-hard, 26 of smart mining")

#: The claim rows, each list placed after the row of its key.
CLAIMS_AFTER = {
    "wu_t4": [
        {"id": "wu_t4_t6_clustering", "paper": WU, "where": "Tables 4–6, StructClustering rows",
         "experiment": "wu_tables",
         "claim": "the margin loss beats the facility-location clustering loss (R@1: SOP 72.7 vs 67.0, CARS196 79.6 "
                  "vs 58.1, CUB200 63.6 vs 48.2)",
         "checks": [("margin-dw-b80", "facility_location-b80")],
         "protocol": _WU_TABLES + "; the clustering loss of configs/song_facility_location.yaml (γ = 1, 5 rounds "
                                  "of refinement) on each batch's clustering"},
        {"id": "wu_t5_t6_pddm", "paper": WU, "where": "Tables 5–6, cropped images, PDDM rows",
         "experiment": "wu_tables",
         "claim": "the margin loss beats PDDM triplet and quadruplet (R@1: cropped CARS196 86.9 vs 46.4 and 57.4, "
                  "cropped CUB200 63.9 vs 50.9 and 58.3)",
         "checks": [("margin-dw-b80", "pddm-b80"), ("margin-dw-b80", "pddm-triplet-b80")],
         "protocol": _WU_TABLES, "caveat": _PDDM},
        {"id": "wu_t4_t6_hdc", "paper": WU, "where": "Tables 4–6, HDC rows",
         "claim": "the margin loss beats HDC (R@1: SOP 72.7 vs 69.5, CARS196 79.6 vs 73.7, CUB200 63.6 vs 53.6; "
                  "cropped 86.9 vs 83.8 and 63.9 vs 60.7)",
         "experiment": "wu_tables",
         "checks": [("margin-dw-b80", "hdc-b80")],
         "protocol": _WU_TABLES + "; HDC as configs/yuan_hdc.yaml: three levels at the ends of the small CNN's "
                                  "three stages, each globally pooled to 42 dimensions (126 in all, where the "
                                  "other arms have 128), the contrastive loss per level, filter_percentage 0.5"},
    ],
    "hong_t2_t4": [
        {"id": "hong_t2_t4_cluster", "paper": HONG, "where": "Tables 2–4, Cluster rows", "experiment": "hong_tables",
         "claim": "balanced contrastive + IS beats the clustering loss (R@1: CUB 54.22 vs 51.40, Cars 69.18 vs "
                  "60.95, SOP 70.36 vs 65.31)",
         "checks": [("balanced-group4x16-is", "facility_location-group4x16")],
         "protocol": "Hong: CUB, Cars and SOP, about 22 epochs, the other methods' training not described; here: "
                     "2,000 steps, both on Hong's (4, 16)-group design with the balanced arms' schedule (lr ×0.9 "
                     "every 100 steps), the clustering loss of configs/song_facility_location.yaml"},
    ],
    "duan_t3_semi": [
        {"id": "duan_t3_others", "paper": DUAN, "where": "Table 3, N-pair sampling and FANNG rows",
         "experiment": "duan_tables",
         "claim": "DE-DSP beats N-pair sampling (46.3 R@1) and FANNG (58.2) with the triplet loss",
         "checks": [("triplet-learned-b80", "triplet-npair-b80"), ("triplet-learned-b80", "triplet-smart_mining-t26")],
         "protocol": _DUAN_T3, "caveat": _FANNG},
        {"id": "duan_t3_samplers", "paper": DUAN, "where": "Table 3, the other samplers",
         "experiment": "duan_tables",
         "claim": "FANNG beats semi-hard sampling, which beats N-pair sampling, with the triplet loss (58.2, 52.4, "
                  "46.3 R@1)",
         "checks": [("triplet-smart_mining-t26", "triplet-semi_hard-b80"), ("triplet-semi_hard-b80", "triplet-npair-b80")],
         "protocol": _DUAN_T3, "caveat": _FANNG},
    ],
    "duan_npair": [
        {"id": "duan_t1_t2_dsp", "paper": DUAN, "where": "Tables 1–2, DDML, Lifted and Clustering rows",
         "experiment": "duan_tables",
         "claim": "DE-DSP (N-pair) beats DDML, lifted structure and clustering (R@1 on CUB, Cars196, SOP and "
                  "In-Shop; Clustering has no In-Shop row)",
         "checks": [("npair-learned-m4", other) for other in ("ddml-b80", "lifted_structured-b80",
                                                               "facility_location-b80")],
         "protocol": _DUAN_TABLES,
         "caveat": "arms of different batch designs (20 × 4 against 16 × 5), paired by seed alone; DAML and the "
                   "angular loss are left out: the tables put them above DE-DSP (N-pair) on some data sets and "
                   "below on others"},
        {"id": "duan_t1_t2_ddml", "paper": DUAN, "where": "Tables 1–2, DDML row",
         "experiment": "duan_tables",
         "claim": "every other method beats DDML (R@1: CUB 31.2, Cars196 32.7, SOP 42.1, In-Shop 24.4, the lowest "
                  "row of each)",
         "checks": [(other, "ddml-b80") for other in ("triplet-random-b80-t64", "triplet-semi_hard-b80",
                                                       "lifted_structured-b80", "facility_location-b80", "npair-m4")],
         "protocol": _DUAN_TABLES + "; Duan's Triplet row is random triplets at the learned arm's 64 a step "
                                    "(triplet-random-b80-t64, as duan_t3_random)",
         "caveat": "N-pair (20 × 4) against DDML (16 × 5): different batch designs, paired by seed alone"},
        {"id": "duan_t1_t2_daml", "paper": DUAN, "where": "Tables 1–2, DAML row",
         "experiment": "duan_tables",
         "claim": "DAML beats DDML and the triplet loss with semi-hard sampling and with DE-DSP (R@1 on CUB, "
                  "Cars196, SOP and In-Shop)",
         "checks": [("daml-b80", other) for other in ("ddml-b80", "triplet-semi_hard-b80", "triplet-learned-b80")],
         "protocol": _DUAN_TABLES,
         "caveat": "the DAML arm takes configs/daml.yaml's options (the triplet form; λ = λ_1 = λ_2 = 1, "
                   "DAMLLoss's defaults; real_weight 1, the real negatives' loss added in place of the "
                   "paper's metric pre-training) and its random_triplets sampler"},
    ],
    "draft_t4_t6": [
        {"id": "draft_t5", "paper": DRAFT, "where": "Table 5, original images", "experiment": "wu_tables",
         "claim": "the draft's method beats triplet semi-hard, lifted structured, N-pairs and StructClustering on "
                  "CARS196 (R@1 65.5 vs 51.5, 53.0, 53.9, 58.1)",
         "checks": [("contrastive-dw-b80", other) for other in (
             "triplet-semi_hard-b80", "lifted_structured-b80", "npair-b80", "facility_location-b80")],
         "protocol": "the draft: CARS196, its training not described; " + _HERE_B80,
         "caveat": _DRAFT_METHOD + "; N-pairs as wu_t4 (40 classes × 2)"},
        {"id": "draft_t5_cropped", "paper": DRAFT, "where": "Table 5, cropped images", "experiment": "wu_tables",
         "claim": "the draft's method beats PDDM triplet and quadruplet on cropped CARS196 (R@1 73.1 vs 46.4, 57.4)",
         "checks": [("contrastive-dw-b80", "pddm-b80"), ("contrastive-dw-b80", "pddm-triplet-b80")],
         "protocol": "the draft: cropped CARS196, its training not described; " + _HERE_B80,
         "caveat": _DRAFT_METHOD + "; " + _PDDM},
        {"id": "draft_t7", "paper": DRAFT, "where": "Table 7", "experiment": "wu_tables",
         "claim": "the draft's method beats histogram, binomial deviance, triplet semi-hard, lifted structured, "
                  "N-pairs and StructClustering on SOP (R@1 71.0 vs 63.9, 65.5, 66.7, 62.5, 66.4, 67.0)",
         "checks": [("contrastive-dw-b80", f"{other}-b80") for other in (
             "histogram", "binomial_deviance", "triplet-semi_hard", "lifted_structured", "npair",
             "facility_location")],
         "protocol": "the draft: SOP, its training not described; " + _HERE_B80,
         "caveat": _DRAFT_METHOD + "; N-pairs as wu_t4 (40 classes × 2)"},
    ],
}
