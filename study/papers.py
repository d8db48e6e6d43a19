"""The papers the reproduction study reads, as the claims table names them."""

WU, HONG, LU, DUAN, DRAFT, XBM = ("Wu et al. 2017", "Hong et al.", "Lu et al. 2019", "Duan et al. 2019",
                                 "Deep Embeddings (draft)", "Wang et al. 2020")
