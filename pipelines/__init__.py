"""pipelines: the data side of tfdml, in tf.data only.

Sources (bundled default data, image folders, TFDS benchmarks, arrays), batch
designs ((m, n)-group, p-random, m-per-class) and augmentation. Batches follow
the batch contract in DESIGN.md: ``(x, {"label", "class_size", "w_pos",
"w_neg"[, "pair_id"]})``. This package never imports the model side.
"""
