"""Every table and figure claim of the five seed papers the reproduction study reads (Wu et al.
2017, Hong et al., Lu et al. 2019, Duan et al. 2019 and the "Deep Embeddings" draft), and the
memory claims of Wang et al. 2020 (XBM), run or not, as data. A figure that illustrates and claims
nothing is listed in :data:`ILLUSTRATIONS` instead.

One row per claim: the paper, its figure or table, the claim in the paper's
terms, and either the **checks** that test it (run by the experiment
``python study/reproduce.py --claim <experiment>``) or the reason it is
**untested**. The study report's claims table and every verdict are generated from
these rows through :func:`verdicts.judge`; nothing else states a verdict.

A check is ``(better, worse)``: an arm of ``reproduce.ARMS``, or a contrast
``(arm_a, arm_b)`` meaning arm_a − arm_b per seed (Hong's "the design matters
less with IS" is a difference of differences). ``at``: the checks are read on
the per-evaluation curve after these fractions of the budget instead of at the
end (``None`` among them: at the end too). ``kind`` "not worse" only where the
paper's claim is itself "not worse" (Hong's Fig. 4, "not sensitive to λ"; Table 4,
untested). ``metric``: only a claim whose
subject is not retrieval names one, the training figure its experiment records
(Hong's Fig. 2 and its investigations: the training objective); every other
claim is judged on MAP@R.

``protocol`` says how the paper ran it and how this study did, where they
differ in a way that bears on the verdict (a budget with a protocol of its own, ``wu_scratch``,
shows its own instead). ``caveat``: where the checks themselves differ from the paper's
comparison (a sampler that is not the paper's, arms at different tuple counts), shown with the
claim under every budget.
"""

import seed_tables
from papers import DRAFT, DUAN, HONG, LU, WU, XBM

_WU_PROTOCOL = ("Wu: SOP, from scratch, 100 epochs, the best epoch reported (§5.1); here: 2,000 steps, "
                "about 1 epoch of the kanji set (0.5 at batch 40, 1.6 at 120), the final step")


_XBM_PROTOCOL = ("Wang et al.: SOP, In-shop, VehicleID, ImageNet-pretrained, memory sizes up to the training "
                 "split, warm-up of 1k iterations; here: from scratch, the (4, 16)-group design (B = 64), "
                 "memory 256 and 1,024 embeddings, the memory off for the first quarter of the steps")


_PRETRAINED = "needs the ImageNet-pretrained backbone arms (none is run yet)"

_SEMI_HARD_PAIRS = ("the semi-hard arms of the pair losses (contrastive, margin) bound each negative by "
                    "the distance D_ap of a positive pair, the triplet rule (tfdml/samplers/semi_hard.py); "
                    "Wu bound it by a fixed 0.5 for pair losses (§5.1)")


def _b(arm, batch):
    return f"{arm}-b{batch}"


CLAIMS = [
    # ------------------------------------------------------------------ Wu et al. 2017
    {"id": "wu_t1_a", "paper": WU, "where": "Table 1 (a)", "experiment": "wu_sampling",
     "claim": "for the same loss, the sampling changes the results a lot",
     "checks": [("contrastive-semi_hard-b80", "contrastive-random-b80"),
                ("contrastive-dw-b80", "contrastive-random-b80"),
                ("margin-semi_hard-b80", "margin-random-b80")],
     "protocol": _WU_PROTOCOL, "caveat": _SEMI_HARD_PAIRS},
    {"id": "wu_t1_b", "paper": WU, "where": "Table 1 (b)", "experiment": "wu_sampling",
     "claim": "distance weighted sampling beats semi-hard (triplet ℓ2², triplet ℓ2, margin) and random "
              "(margin)",
     "checks": [("triplet_sq-dw-b80", "triplet_sq-semi_hard-b80"), ("triplet-dw-b80", "triplet-semi_hard-b80"),
                ("margin-dw-b80", "margin-semi_hard-b80"), ("margin-dw-b80", "margin-random-b80")],
     "protocol": _WU_PROTOCOL, "caveat": _SEMI_HARD_PAIRS},
    {"id": "wu_t1_c", "paper": WU, "where": "Table 1 (c)", "experiment": "wu_sampling",
     "claim": "the contrastive loss with random pairs is far worse than with triplet-like sampling",
     "checks": [("contrastive-semi_hard-b80", "contrastive-random-b80"),
                ("contrastive-dw-b80", "contrastive-random-b80")],
     "protocol": _WU_PROTOCOL, "caveat": _SEMI_HARD_PAIRS},
    {"id": "wu_t1_d", "paper": WU, "where": "Table 1 (d)", "experiment": "wu_sampling",
     "claim": "the margin loss beats the other losses whatever the sampling",
     "checks": [("margin-random-b80", "contrastive-random-b80"),
                ("margin-semi_hard-b80", "contrastive-semi_hard-b80"),
                ("margin-semi_hard-b80", "triplet_sq-semi_hard-b80"),
                ("margin-semi_hard-b80", "triplet-semi_hard-b80"),
                ("margin-dw-b80", "contrastive-dw-b80"), ("margin-dw-b80", "triplet_sq-dw-b80"),
                ("margin-dw-b80", "triplet-dw-b80")],
     "protocol": _WU_PROTOCOL, "caveat": _SEMI_HARD_PAIRS},
    {"id": "wu_t2_e", "paper": WU, "where": "Table 2 (e)", "experiment": "wu_batch_size",
     "claim": "at batch 40, 80 and 120: distance weighted beats semi-hard (triplet ℓ2, margin), semi-hard "
              "beats random (margin), margin beats triplet ℓ2 (distance weighted)",
     "checks": [check for b in (40, 80, 120) for check in (
         (_b("triplet-dw", b), _b("triplet-semi_hard", b)), (_b("margin-dw", b), _b("margin-semi_hard", b)),
         (_b("margin-semi_hard", b), _b("margin-random", b)), (_b("margin-dw", b), _b("triplet-dw", b)))],
     "protocol": _WU_PROTOCOL, "caveat": _SEMI_HARD_PAIRS},
    {"id": "wu_t3_f", "paper": WU, "where": "Table 3 (f)", "experiment": "wu_beta",
     "claim": "a learned β_class beats every fixed β0 (0.8, 1.0, 1.2, 1.4)",
     "checks": [("margin-dw-b80", f"margin-dw-b80-fixed{b}") for b in (0.8, 1.0, 1.2, 1.4)],
     "protocol": "Wu: SOP, ImageNet-pretrained, 8k iterations; here: from scratch, 2,000 steps"},
    {"id": "wu_fig6_g", "paper": WU, "where": "Fig. 6 (g)", "experiment": "wu_sampling",
     "claim": "margin + distance weighted converges faster than triplet + semi-hard, which converges faster "
              "than contrastive + random pairs",
     "checks": [("margin-dw-b80", "triplet-semi_hard-b80"), ("triplet-semi_hard-b80", "contrastive-random-b80")],
     "at": (0.125, 0.25),
     "protocol": "Wu: validation accuracy on LFW along CASIA-WebFace training; here: test MAP@R after 250 and "
                 "500 of 2,000 steps"},
    {"id": "wu_t4", "paper": WU, "where": "Table 4", "experiment": "wu_losses",
     "claim": "the margin loss beats the histogram, binomial deviance, triplet (semi-hard), lifted structured "
              "and N-pair losses",
     "checks": [("margin-dw-b80", f"{loss}-b80") for loss in
                ("histogram", "binomial_deviance", "triplet-semi_hard", "lifted_structured", "npair")],
     "protocol": "Wu: SOP, ImageNet-pretrained (§5.2: the comparisons with other methods use pre-trained "
                 "models), the best epoch; here: from scratch, 2,000 steps, about 1 epoch of the kanji set, the final "
                 "step; every loss at batch 80 with its paper's hyper-parameters (configs/), N-pair as 40 classes × 2"},
    {"id": "wu_fig8", "paper": WU, "where": "Fig. 8 (supplement)",
     "claim": "the margin loss converges to the same LFW verification threshold whatever the images per class "
              "m; the triplet loss does not and fluctuates early",
     "untested": "face verification (the optimal threshold along training) is not scored, and no arm varies m"},
    {"id": "wu_t1_pretrain", "paper": WU, "where": "Table 1, pre-trained row",
     "claim": "ImageNet pre-training adds about 10 points of R@1 to margin + distance weighted",
     "untested": _PRETRAINED},
    {"id": "wu_t3_range", "paper": WU, "where": "Table 3, note",
     "claim": "the learned class-specific β_class range from 0.94 to 1.45 (hence the fixed β0 = 1.2)",
     "untested": "the runs do not record the learned β values (only the metrics along training)"},
    {"id": "wu_t7", "paper": WU, "where": "Table 7",
     "claim": "margin + distance weighted beats the other models trained on CASIA-WebFace in LFW face "
              "verification",
     "untested": "face verification is not scored, and this study has no face data set; Tables 5–6's other "
                 "systems are wu_t4_t6_clustering, wu_t5_t6_pddm and wu_t4_t6_hdc, their losses of Table 4 wu_t4 "
                 "(one data set here)"},
    {"id": "wu_fig3b", "paper": WU, "where": "Fig. 3 (b)",
     "claim": "distance weighted sampling draws negatives over a wide range of distances; random, semi-hard and "
              "hard mining are biased towards certain distances",
     "untested": "needs a probe of the distances of the negatives each sampler draws (no training; not written "
                 "yet)"},
    {"id": "wu_fig7", "paper": WU, "where": "Fig. 7 (supplement)",
     "claim": "the pairwise distances of negative pairs follow a roughly bell-shaped curve",
     "untested": "needs a probe of the trained models' negative-pair distances (no training; not written yet)"},
    {"id": "wu_t8", "paper": WU, "where": "Table 8 (supplement)",
     "claim": "Table 2's orderings at R@10, R@100 and R@1000",
     "untested": "the runs score R@1 and R@5 only (and MAP@R, which ranks every same-class image)"},
    # ------------------------------------------------------------------ Hong et al.
    {"id": "hong_t1_swing", "paper": HONG, "where": "Table 1", "experiment": "hong_designs",
     "claim": "without importance sampling the result varies strongly with the batch design",
     "checks": [("balanced-group2x32-nois", "balanced-group32x2-nois"),
                ("balanced-prandom0.1-nois", "balanced-prandom0.9-nois")],
     "protocol": "Hong: CUB, 2,000 iterations (about 22 epochs), p-random with 2,016 pairs a batch; here: "
                 "2,000 steps (0.85 epoch), p-random with 64 pairs"},
    {"id": "hong_t1_is", "paper": HONG, "where": "Table 1", "experiment": "hong_designs",
     "claim": "importance sampling improves every batch design",
     "checks": [(f"balanced-{d}-is", f"balanced-{d}-nois")
                for d in ("group2x32", "group4x16", "group8x8", "group32x2", "prandom0.9", "prandom0.1")],
     "protocol": "as hong_t1_swing"},
    {"id": "hong_t1_flat", "paper": HONG, "where": "Table 1", "experiment": "hong_designs",
     "claim": "with importance sampling the design matters less (the gap between designs shrinks)",
     "checks": [(("balanced-group2x32-nois", "balanced-group32x2-nois"),
                 ("balanced-group2x32-is", "balanced-group32x2-is")),
                (("balanced-prandom0.1-nois", "balanced-prandom0.9-nois"),
                 ("balanced-prandom0.1-is", "balanced-prandom0.9-is"))],
     "protocol": "as hong_t1_swing"},
    {"id": "hong_t1_rows", "paper": HONG, "where": "Table 1, (16, 4)-group and p = 0.5 rows",
     "experiment": "hong_designs",
     "claim": "the same, for the (16, 4)-group and p-random p = 0.5 designs",
     "checks": [(f"balanced-{d}-is", f"balanced-{d}-nois") for d in ("group16x4", "prandom0.5")],
     "protocol": "as hong_t1_swing; checks that importance sampling improves these two designs (hong_t1_is's "
                 "part): the swing and the gap between designs (hong_t1_swing, hong_t1_flat) are judged on the "
                 "extreme designs, which these middle rows lie between"},
    {"id": "hong_fig1", "paper": HONG, "where": "Fig. 1",
     "claim": "perturbing the importance weights by δ ≠ 1 lowers R@1 ((4, 16)- and (32, 2)-group)",
     "experiment": "hong_perturbation",
     "checks": [(f"balanced-group{design}-is", other) for design in ("4x16", "32x2")
                for other in (f"balanced-group{design}-nois", f"balanced-group{design}-is-delta-1.0",
                              f"balanced-group{design}-is-delta0.5", f"balanced-group{design}-is-delta2.0")],
     "protocol": "Hong: CUB, pretrained, R@1 along δ; here: from scratch, 2,000 steps, δ ∈ {−1, 0, 0.5, 1, 2} "
                 "(δ = 0: the no-IS arm, δ = 1: the IS arm), judged on MAP@R"},
    {"id": "hong_fig2", "paper": HONG, "where": "Fig. 2", "experiment": "hong_objective",
     "claim": "with the traditional contrastive loss, importance sampling makes the training loss (10) fall "
              "faster and lower",
     "checks": [("contrastive-group4x16-is-fig2", "contrastive-group4x16-nois-fig2")], "at": (0.125, 0.25, None),
     "metric": "train_objective",
     "protocol": "Hong: CUB, the loss (10) on the full training set every 100 iterations; here: the (4, 16)-group "
                 "design, the loss without importance weights over every pair of a fixed sample of 2,048 "
                 "training images at each of the 8 evaluations, read after 250 and 500 of 2,000 steps (faster) "
                 "and at the end (lower); margin 1 as the balanced arms"},
    {"id": "hong_fig3_is", "paper": HONG, "where": "Fig. 3", "experiment": "hong_imbalance",
     "claim": "under class imbalance (γ), importance sampling helps at every γ",
     "checks": [(f"balanced-group4x16{g}-is", f"balanced-group4x16{g}-nois")
                for g in ("", "-imbalance0.5", "-imbalance0.9")],
     "protocol": "Hong: γ from 0 to 1, about 22 epochs of CUB; here: γ 0, 0.5, 0.9, 0.85–1.5 epochs"},
    {"id": "hong_fig3_falls", "paper": HONG, "where": "Fig. 3", "experiment": "hong_imbalance",
     "claim": "both with and without importance sampling the result falls as γ grows (less training data)",
     "checks": [("balanced-group4x16-is", "balanced-group4x16-imbalance0.9-is"),
                ("balanced-group4x16-nois", "balanced-group4x16-imbalance0.9-nois")],
     "protocol": "as hong_fig3_is: a fixed number of steps, so removing images does not shorten training"},
    {"id": "hong_fig4", "paper": HONG, "where": "Fig. 4", "experiment": "hong_lambda",
     "claim": "the result is not sensitive to λ near its maximum: λ = 128 and 512 are not worse than 256",
     "kind": "not worse",
     "checks": [("balanced-group4x16-is-lam128", "balanced-group4x16-is"),
                ("balanced-group4x16-is-lam512", "balanced-group4x16-is")],
     "protocol": "Hong: SOP, λ from 2^0 to 2^13, R@1; here: the (4, 16)-group design with IS, λ ∈ {1, 128, 256, "
                 "512, 8192}, 2,000 steps, judged on MAP@R with a 1-point not-worse margin. Hong's second curve "
                 "(the traditional loss on λ + 1 labels sampled every 100 iterations) is not run"},
    {"id": "hong_fig4_ends", "paper": HONG, "where": "Fig. 4", "experiment": "hong_lambda",
     "claim": "the result degrades as λ approaches 0 (fast) and as it grows far beyond the optimum (slower)",
     "checks": [("balanced-group4x16-is", "balanced-group4x16-is-lam1"),
                ("balanced-group4x16-is", "balanced-group4x16-is-lam8192")],
     "protocol": "as hong_fig4; λ = 256 against both ends of the paper's range"},
    {"id": "hong_fig2_recall", "paper": HONG, "where": "Fig. 2, R@1 panel", "experiment": "hong_objective",
     "claim": "with the traditional contrastive loss, importance sampling gives a higher R@1 along training",
     "checks": [("contrastive-group4x16-is-fig2", "contrastive-group4x16-nois-fig2")], "at": (0.125, 0.25, None),
     "protocol": "Hong: CUB, R@1 every 100 iterations; here: the `-fig2` arms of hong_fig2 (the (4, 16)-group "
                 "design, margin 1), read after 250 and 500 of 2,000 steps and at the end"},
    {"id": "hong_t2_t3_is", "paper": HONG, "where": "Tables 2–3, Contrastive and Contrastive+IS rows",
     "experiment": "hong_objective",
     "claim": "importance sampling improves the traditional contrastive loss (CUB +2.7, Cars +7.8 R@1)",
     "checks": [("contrastive-group4x16-is-fig2", "contrastive-group4x16-nois-fig2")],
     "protocol": "Hong: CUB and Cars, about 22 epochs; here: the `-fig2` arms (the (4, 16)-group design, margin 1), "
                 "2,000 steps, the final step"},
    {"id": "hong_t2_t4", "paper": HONG, "where": "Tables 2–4",
     "claim": "balanced contrastive + IS beats triplet, lifted, cluster and N-pair losses on CUB and Cars "
              "(Tables 2–3) and matches them on SOP (Table 4, a not-worse claim)",
     "untested": "needs the other methods' arms (triplet, lifted, N-pair) at Hong's design and budget; "
                 "their Cluster rows are hong_t2_t4_cluster, their Contrastive against Contrastive+IS rows "
                 "hong_t2_t3_is"},
    # ------------------------------------------------------------------ Lu et al. 2019
    {"id": "lu_t1", "paper": LU, "where": "Table 1", "experiment": "lu_topk",
     "claim": "ℓ_k improves Precision@k over the triplet loss with semi-hard and with distance weighted "
              "sampling",
     "checks": [("precision_at_k-m10", "triplet-semi_hard-m10"), ("precision_at_k-m10", "triplet-dw-m10")],
     "protocol": "Lu: CUB, ImageNet-pretrained DenseNet-201, P@k; here: from scratch, 2,000 steps, judged on "
                 "MAP@R with P@5 reported"},
    {"id": "lu_uniform", "paper": LU, "where": "§4.5, Fig. 4",
     "claim": "of the four baselines, the triplet loss with uniform sampling always performs worst",
     "experiment": "lu_topk",
     "checks": [("triplet-hard-m10", "triplet-random-m10"), ("triplet-semi_hard-m10", "triplet-random-m10"),
                ("triplet-dw-m10", "triplet-random-m10")],
     "protocol": "Lu: CUB, ImageNet-pretrained DenseNet-201, P@k, uniform sampling of triplets; here: from scratch, "
                 "2,000 steps, judged on MAP@R; uniform = one uniformly drawn negative for every positive pair "
                 "(random_triplets), the triplets per step of the semi-hard and distance weighted arms"},
    {"id": "lu_t1_losses", "paper": LU, "where": "Table 1", "experiment": "lu_losses",
     "claim": "ℓ_k improves Precision@k over the contrastive, lifted structured, N-pair, angular and "
              "Proxy NCA losses",
     "checks": [("precision_at_k-m10", f"{loss}-m10")
                for loss in ("contrastive-all", "lifted_structured", "npair", "angular")]
               + [("precision_at_k-m10-c100", "proxy_nca-m10-c100")],
     "protocol": "Lu: CUB, ImageNet-pretrained DenseNet-201, P@k; here: from scratch, 2,000 steps, Lu's 10 × 8 "
                 "design for every loss, each with its paper's hyper-parameters (configs/), judged on MAP@R "
                 "with P@5 reported; Proxy NCA against ℓ_k both on 100 training classes (CUB's number): on "
                 "all 3,129, 2,000 steps are one epoch, a proxy is pulled in ~5 batches and Proxy NCA "
                 "stayed near chance"},
    {"id": "lu_fig4_ab", "paper": LU, "where": "Fig. 4 (a, b)", "experiment": "lu_topk",
     "claim": "ℓ_k's top-1 precision on test data is above every triplet baseline along training",
     "checks": [("precision_at_k-m10", f"triplet-{s}-m10") for s in ("semi_hard", "dw", "hard", "random")],
     "at": (0.125, 0.25, None),
     "protocol": "Lu: CUB and Cars, ImageNet-pretrained DenseNet-201, P@1 along training, one run; here: from "
                 "scratch, read after 250 and 500 of 2,000 steps and at the end, judged on MAP@R with P@5 beside"},
    {"id": "lu_fig4", "paper": LU, "where": "Fig. 4 (d, e)",
     "claim": "ℓ_k's P@1 is above every baseline along training, per number of sampled triplets",
     "untested": "the runs do not record the number of sampled triplets, Fig. 4's axis"},
    {"id": "lu_fig4_cf", "paper": LU, "where": "Fig. 4 (c, f)",
     "claim": "ℓ_k's precision–recall and ROC curves lie above every baseline's",
     "untested": "the runs do not record precision–recall or ROC curves"},
    # ------------------------------------------------------------------ Duan et al. 2019
    {"id": "duan_t3_semi", "paper": DUAN, "where": "Table 3", "experiment": "duan_dsn",
     "claim": "the learned sampler (DE-DSP) beats semi-hard sampling with the triplet loss (52.4 → 59.3 R@1)",
     "checks": [("triplet-learned-b80", "triplet-semi_hard-b80")],
     "caveat": "a check at different tuple counts: 64 learned tuples a step against semi-hard's 320 "
               "(duan_t3_random compares learned and random at the same 64)",
     "protocol": "Duan: Cars196, pretrained GoogLeNet, candidate pools of ~100 classes × 100 images, a conv "
                 "sampler network on the images, sampler pre-training on; here: the policy picks from the same "
                 "80-image batch that semi-hard searches, an MLP on pooled pixels, no pre-training, 64 tuples a "
                 "step against semi-hard's 320"},
    {"id": "duan_fig3", "paper": DUAN, "where": "Fig. 3", "experiment": "duan_dsn",
     "claim": "the learned sampler's recall is above the triplet loss's along training (CUB, Cars)",
     "checks": [("triplet-learned-b80", "triplet-random-b80-t64")], "at": (0.125, 0.25, None),
     "protocol": "Duan: CUB and Cars, pretrained GoogLeNet, recall along training; here: as duan_t3_random, read "
                 "after 250 and 500 of 2,000 steps and at the end",
     "caveat": "Duan's dashed baseline is the triplet loss with its own sampling; here it is random triplets at the "
               "learned arm's 64 tuples a step"},
    {"id": "duan_t3_random", "paper": DUAN, "where": "Table 3",
     "claim": "DE-DSP beats random triplets with the triplet loss (45.1 → 59.3 R@1, the table's main gain)",
     "experiment": "duan_dsn",
     "checks": [("triplet-learned-b80", "triplet-random-b80-t64")],
     "protocol": "as duan_t3_semi; random: 64 triplets a step drawn uniformly from all the batch's triplets "
                 "(random_triplets, num_triplets 64), the learned arm's 4 mini-batches of 16 tuples"},
    {"id": "duan_npair", "paper": DUAN, "where": "Tables 1–2",
     "claim": "DE-DSP improves the N-pair loss",
     "experiment": "duan_npair",
     "checks": [("npair-learned-m4", "npair-m4")],
     "protocol": "Duan: batch 120, pretrained GoogLeNet, pools of classes; here: from scratch, 2,000 steps, "
                 "20 classes × 4 images, the N-pair DSN drawing 4 mini-batches of N-pair tuples (N = 20) from "
                 "the batch, no pre-training; the N-pair loss of configs/npair.yaml on both arms, on embeddings not "
                 "L2-normalised (the config's setting when they ran; reproduce.RUN_WITH)"},
    # ------------------------------------------------------------------ Deep Embeddings (draft)
    {"id": "draft_thesis", "paper": DRAFT, "where": "abstract, §1 (contribution 3)", "experiment": "wu_sampling",
     "claim": "with the right sampling, the plain contrastive loss is enough: not worse than the triplet and "
              "margin losses with the same sampling",
     "kind": "not worse",
     "checks": [(f"contrastive-{s}-b80", f"{loss}-{s}-b80") for s in ("semi_hard", "dw")
                for loss in ("margin", "triplet", "triplet_sq")],
     "protocol": _WU_PROTOCOL + "; the not-worse margin was set after these runs",
     "caveat": _SEMI_HARD_PAIRS},
    {"id": "draft_t2", "paper": DRAFT, "where": "Table 2",
     "claim": "an ablation of sampling (random, m, k) for triplet semi-hard and the draft's loss on LFW",
     "untested": "the table is empty in the draft (no figures, no direction to test), and LFW verification is "
                 "not scored"},
    {"id": "draft_t4_t6", "paper": DRAFT, "where": "Tables 4 and 6",
     "claim": "the draft's method beats the other methods in LFW verification and on CUB200",
     "untested": "LFW verification is not scored (and the draft's own LFW figure is empty); Table 6 orders "
                 "the systems of Tables 5 and 7 (draft_t5, draft_t7) on CUB200, except on cropped images, where "
                 "PDDM quadruplet is above the draft's method (58.3 vs 56.8 R@1); this study has one data set"},
    {"id": "draft_fig5_6", "paper": DRAFT, "where": "Figs. 5–6",
     "claim": "the classes with the smallest learned β_class are visually simpler than those with the largest",
     "untested": "the runs do not record the learned β values, and visual simplicity is not scored"},
    # ------------------------------------------------------------------ Wang et al. 2020 (XBM)
    {"id": "xbm_size", "paper": XBM, "where": "Fig. 4", "experiment": "xbm_memory",
     "claim": "MAP@R grows with the memory size (contrastive loss; no memory < 256 < 1,024 embeddings)",
     "checks": [("xbm-contrastive-mem256", "xbm-contrastive-mem0"),
                ("xbm-contrastive-mem1024", "xbm-contrastive-mem256"),
                ("xbm-contrastive-mem1024", "xbm-contrastive-mem0")],
     "protocol": _XBM_PROTOCOL},
    {"id": "xbm_ms", "paper": XBM, "where": "Table 1", "experiment": "xbm_memory",
     "claim": "the memory improves the multi-similarity loss (with its miner)",
     "checks": [("xbm-multi_similarity-mem1024", "xbm-multi_similarity-mem0")],
     "protocol": _XBM_PROTOCOL},
    # ------------------------------------------------------------------ investigations (not claims of a paper)
    {"id": "wu_margin_budget", "paper": "investigation", "where": "of wu_t1_d", "experiment": "wu_margin_budget",
     "claim": "with 4× the steps (8,000), margin + distance weighted beats triplet ℓ2 and contrastive",
     "checks": [("margin-dw-b80-x4", "triplet-dw-b80-x4"), ("margin-dw-b80-x4", "contrastive-dw-b80-x4"),
                ("margin-dw-b80-x4", "margin-dw-b80")]},
    {"id": "duan_dsn_causes", "paper": "investigation", "where": "of duan_t3_semi", "experiment": "duan_dsn_causes",
     "claim": "sampler pre-training (200 pools) or Duan's tuples per step (80) closes the gap to semi-hard",
     "caveat": "the checks against semi-hard compare 64 or 80 learned tuples a step with semi-hard's 320",
     "checks": [("triplet-learned-b80-pretrain200", "triplet-learned-b80"),
                ("triplet-learned-b80-t20", "triplet-learned-b80"),
                ("triplet-learned-b80-pretrain200", "triplet-semi_hard-b80"),
                ("triplet-learned-b80-t20", "triplet-semi_hard-b80")]},
    {"id": "duan_paper_setting", "paper": "investigation", "where": "of duan_t3_random",
     "experiment": "duan_paper_setting",
     "claim": "in Duan's setting, a pre-trained policy picking from a pool of 320 images, the learned sampler "
              "beats random triplets from that pool at the same 64 tuples a step, and the pool beats the batch",
     "checks": [("triplet-learned-pool320-pretrain200", "triplet-random-pool320-t64"),
                ("triplet-learned-pool320-pretrain200", "triplet-learned-b80-pretrain200-conv")],
     "protocol": "Duan: pools of ~100 classes × 100 images, a conv sampler network on the images; here: 40 "
                 "classes × 8 images, the loss on the 64 picked tuples, the DSN a conv network on the images "
                 "(§3.2: two 3 × 3 convolution + pooling blocks of 32 filters, a 64-unit layer; "
                 "loss.sampler_options.trunk: conv), pre-trained on 200 pools"},
    {"id": "hong_prandom_pairs", "paper": "investigation", "where": "of hong_t1_is",
     "experiment": "hong_prandom_pairs",
     "claim": "with 256 pairs a batch (4×), importance sampling helps p-random 0.9",
     "checks": [("balanced-prandom0.9-pairs256-is", "balanced-prandom0.9-pairs256-nois"),
                ("balanced-prandom0.9-pairs256-is", "balanced-prandom0.9-is")]},
    {"id": "hong_lambda_2x32", "paper": "investigation", "where": "of hong_t1_is", "experiment": "hong_lambda_2x32",
     "claim": "with a smaller λ (16, 64), (2, 32)-group with importance sampling beats λ = 256 and no IS",
     "checks": [("balanced-group2x32-is-lam16", "balanced-group2x32-is"),
                ("balanced-group2x32-is-lam64", "balanced-group2x32-is"),
                ("balanced-group2x32-is-lam16", "balanced-group2x32-nois"),
                ("balanced-group2x32-is-lam64", "balanced-group2x32-nois")]},
    {"id": "xbm_size_is", "paper": "investigation", "where": "of xbm_size", "experiment": "xbm_memory",
     "claim": "with the memory's importance weights, MAP@R grows with the memory size too",
     "checks": [("xbm-contrastive-is-mem256", "xbm-contrastive-is-mem0"),
                ("xbm-contrastive-is-mem1024", "xbm-contrastive-is-mem256"),
                ("xbm-contrastive-is-mem1024", "xbm-contrastive-is-mem0")]},
    {"id": "hong_objective_lower", "paper": "investigation", "where": "of hong_fig2", "experiment": "hong_objective",
     "claim": "with the balanced contrastive loss, the objective (10) on a training sample ends lower with IS",
     "checks": [("balanced-group4x16-is-fig2", "balanced-group4x16-nois-fig2")],
     "metric": "train_objective"},
    {"id": "hong_objective_faster", "paper": "investigation", "where": "of hong_fig2",
     "experiment": "hong_objective",
     "claim": "with the balanced contrastive loss, the objective (10) falls faster with IS (after 250 and 500 "
              "steps)",
     "checks": [("balanced-group4x16-is-fig2", "balanced-group4x16-nois-fig2")], "at": (0.125, 0.25),
     "metric": "train_objective"},
]



def _placed(rows, after):
    """``rows`` with each list of ``after`` placed after the row of its key."""
    out = []
    for row in rows:
        out += [row] + after.get(row["id"], [])
    return out


CLAIMS = _placed(CLAIMS, seed_tables.CLAIMS_AFTER)

#: Figures and tables of the seed papers that state no claim to test: (paper, where, what).
ILLUSTRATIONS = [
    (WU, "Figs. 1, 4, 5", "an overview of the pipeline, the losses' shapes, retrieval examples"),
    (WU, "Figs. 2, 3 (a)", "the distance density on the sphere and the gradient variance, from formulas"),
    (HONG, "–", "every table and figure is a row above"),
    (LU, "Figs. 1–3, 5, 6", "toy examples of the loss, retrieval examples, a t-SNE map"),
    (DUAN, "Figs. 1, 2, 4", "an overview, the sampler network's architecture, picked triplets"),
    (DRAFT, "Figs. 1, 3, 4; Table 1", "the losses' shapes, an empty convergence placeholder, the data sets"),
]

#: Row ids in order; the table's one key.
IDS = [row["id"] for row in CLAIMS]


def by_id(claim_id):
    for row in CLAIMS:
        if row["id"] == claim_id:
            return row
    raise KeyError(f"no claim {claim_id!r}; the claims are {', '.join(IDS)}")


def sides(check):
    """The arms one check reads."""
    out = []
    for side in check:
        out += list(side) if isinstance(side, tuple) else [side]
    return out


def rows_of(experiment):
    """The claims an experiment (``reproduce.py --claim``) tests."""
    return [row for row in CLAIMS if row.get("experiment") == experiment]
