"""A map of the embedding: TensorBoard projector files and a 2-D plot coloured by class.

* :func:`write_projector` — a directory TensorBoard's projector (and the standalone
  projector at projector.tensorflow.org) opens: ``tensors.tsv`` (one embedding per line),
  ``metadata.tsv`` (label and class name per point), ``sprite.png`` (a thumbnail per point,
  when images are given) and ``projector_config.pbtxt`` naming them. Point it at the run's
  folder: ``tensorboard --logdir runs/NAME/eval``.
* :func:`coordinates` — 2-D coordinates of the embeddings: UMAP (McInnes et al. 2018) when
  ``umap-learn`` is installed and ``method="auto"``, else t-SNE (van der Maaten & Hinton
  2008, scikit-learn's ``TSNE``, seeded).
* :func:`plot` — the 2-D map as a PNG, one colour per class; with many classes (more than
  :data:`MAX_LEGEND_CLASSES`) each class's name is written at its median point instead of a
  legend, so that a map of hundreds of classes stays readable.
* :func:`write` — both for one split, on at most ``max_points`` points drawn with a seed.

Everything is written atomically (:mod:`tfdml.files`): a kill leaves the old map or the new.
"""

import math
import os

import numpy as np

from tfdml import files

#: Classes up to which the plot has a legend; beyond, names sit at the classes' medians.
MAX_LEGEND_CLASSES = 20
#: Classes up to which the plot writes names at all (beyond, colours only; the title says so).
MAX_NAMED_CLASSES = 200
#: Points a map shows by default (t-SNE's cost grows as N log N; the sprite's as N).
DEFAULT_MAX_POINTS = 5000
#: TensorBoard's projector reads sprites up to this size (pixels a side).
MAX_SPRITE_SIZE = 8192
METHODS = ("auto", "tsne", "umap")


def _check(embeddings, labels):
    embeddings = np.asarray(embeddings, np.float32)
    labels = np.asarray(labels).reshape(-1)
    if embeddings.ndim != 2 or embeddings.shape[0] != labels.shape[0]:
        raise ValueError(f"An embedding map needs embeddings [N, d] and N labels; got embeddings of shape "
                         f"{embeddings.shape} and {labels.shape[0]} labels.")
    if embeddings.shape[0] < 2:
        raise ValueError(f"An embedding map needs at least 2 points, got {embeddings.shape[0]}.")
    if not np.all(np.isfinite(embeddings)):
        raise ValueError("The embeddings hold NaN or infinite values: a map of them would be meaningless; "
                         "evaluate a model whose embeddings are finite.")
    return embeddings, labels


def subsample(num, max_points, seed=0):
    """Sorted indices of at most ``max_points`` of ``num`` points, drawn with ``seed``."""
    if max_points is None or num <= max_points:
        return np.arange(num)
    return np.sort(np.random.default_rng(seed).choice(num, int(max_points), replace=False))


def _names(labels, class_names):
    labels = np.asarray(labels)
    if not class_names:
        return [str(v) for v in labels]
    key = int if np.issubdtype(labels.dtype, np.integer) else (lambda v: v)
    return [str(class_names.get(key(v), v)) for v in labels]


def _clean(text):
    return str(text).replace("\t", " ").replace("\n", " ")


def sprite(images, max_size=MAX_SPRITE_SIZE):
    """(uint8 RGB [S, S, 3] image, thumbnail side): the images [N, H, W(, C)] in [0, 1] in a
    square grid of ceil(sqrt(N)) cells a side, row by row, each cell at most
    ``max_size / cells`` pixels (a larger image is shrunk by averaging blocks)."""
    images = np.clip(np.asarray(images, np.float32), 0.0, 1.0)
    if images.ndim == 3:
        images = images[..., None]
    if images.shape[-1] == 1:
        images = np.repeat(images, 3, axis=-1)
    images = images[..., :3]
    num, height, width = images.shape[:3]
    cells = math.ceil(math.sqrt(num))
    side = max(height, width)
    step = max(1, math.ceil(side / max(1, max_size // cells)))
    if step > 1:
        pad_h, pad_w = (-height) % step, (-width) % step
        images = np.pad(images, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
        images = images.reshape(num, images.shape[1] // step, step, images.shape[2] // step, step, 3).mean((2, 4))
    height, width = images.shape[1:3]
    thumb = max(height, width)
    canvas = np.ones((cells * thumb, cells * thumb, 3), np.float32)
    for index in range(num):  # one copy per image, not on a training path
        row, col = divmod(index, cells)
        canvas[row * thumb: row * thumb + height, col * thumb: col * thumb + width] = images[index]
    return (canvas * 255.0 + 0.5).astype(np.uint8), thumb


def write_projector(embeddings, labels, out_dir, images=None, class_names=None, tensor_name="embedding"):
    """Write the projector directory ``out_dir`` (replacing an earlier one atomically);
    returns its path. ``images``: optional [N, H, W(, C)] in [0, 1] for the sprite."""
    embeddings, labels = _check(embeddings, labels)
    names = _names(labels, class_names)
    with files.atomic_directory(out_dir) as tmp:
        with open(os.path.join(tmp, "tensors.tsv"), "w", encoding="utf-8") as fh:
            for row in embeddings:
                fh.write("\t".join(f"{v:.9g}" for v in row) + "\n")
        with open(os.path.join(tmp, "metadata.tsv"), "w", encoding="utf-8") as fh:
            fh.write("label\tclass\n")
            for label, name in zip(labels, names):
                fh.write(f"{_clean(label)}\t{_clean(name)}\n")
        config = [f'embeddings {{\n  tensor_name: "{tensor_name}"\n  tensor_path: "tensors.tsv"\n'
                  '  metadata_path: "metadata.tsv"\n']
        if images is not None:
            from PIL import Image

            picture, thumb = sprite(images)
            Image.fromarray(picture).save(os.path.join(tmp, "sprite.png"))
            config.append(f'  sprite {{\n    image_path: "sprite.png"\n    single_image_dim: {thumb}\n'
                          f'    single_image_dim: {thumb}\n  }}\n')
        config.append("}\n")
        with open(os.path.join(tmp, "projector_config.pbtxt"), "w", encoding="utf-8") as fh:
            fh.write("".join(config))
    return out_dir


def coordinates(embeddings, method="auto", distance="euclidean", seed=0):
    """[N, 2] coordinates of the embeddings [N, d] (N ≥ 2) for a map; returns (coords, the
    method used). ``distance``: ``"cosine"`` (or ``"dot"``) lays out by cosine distance,
    anything else by Euclidean distance."""
    if method not in METHODS:
        raise ValueError(f"Unknown map method {method!r}; choose one of {METHODS}.")
    embeddings = np.asarray(embeddings, np.float32)
    metric = "cosine" if distance in ("cosine", "dot") else "euclidean"
    if method in ("auto", "umap"):
        try:
            import umap  # optional: pip install umap-learn
        except ImportError:
            if method == "umap":
                raise ValueError("method='umap' needs the umap-learn package: pip install umap-learn, "
                                 "or use method='tsne'.") from None
        else:
            reducer = umap.UMAP(n_components=2, metric=metric, random_state=seed,
                                n_neighbors=max(2, min(15, embeddings.shape[0] - 1)))
            return np.asarray(reducer.fit_transform(embeddings), np.float32), "umap"
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    num = embeddings.shape[0]
    perplexity = float(min(30.0, max(1.0, (num - 1) / 3.0)))
    tsne = TSNE(n_components=2, perplexity=min(perplexity, num - 1 - 1e-3), metric=metric,
                init="pca" if metric == "euclidean" else "random", random_state=seed)
    with threadpool_limits(limits=1, user_api="blas"):  # small products: threads only wait
        return np.asarray(tsne.fit_transform(embeddings), np.float32), "tsne"


def class_colours(num_classes):
    """[K, 4] RGBA colours of K classes: tab10 / tab20 up to 20, else K hues spread around
    the colour wheel and interleaved so that consecutive classes differ."""
    from matplotlib import colormaps

    if num_classes <= 10:
        return colormaps["tab10"](np.arange(num_classes))
    if num_classes <= 20:
        return colormaps["tab20"](np.arange(num_classes))
    hues = (np.arange(num_classes) * 0.618033988749895) % 1.0  # golden-ratio steps
    return colormaps["hsv"](hues)


def plot(coords, labels, path, class_names=None, title=None, method=None):
    """The map as a PNG at ``path``: one dot per point, coloured by class; returns ``path``."""
    from matplotlib.figure import Figure

    from tfdml import figures

    coords = np.asarray(coords, np.float32)
    labels = np.asarray(labels).reshape(-1)
    classes, index = np.unique(labels, return_inverse=True)
    colours = class_colours(len(classes))
    names = _names(classes, class_names)
    fig = Figure(figsize=(9, 9))
    ax = fig.add_subplot(1, 1, 1)
    size = float(np.clip(6000.0 / len(labels), 2.0, 30.0))
    ax.scatter(coords[:, 0], coords[:, 1], c=colours[index], s=size, linewidths=0)
    legend = len(classes) <= MAX_LEGEND_CLASSES
    if legend:
        for k, name in enumerate(names):
            ax.scatter([], [], color=colours[k], label=name, s=20)
        ax.legend(fontsize=7, markerscale=1.0, loc="best", title="class")
    elif len(classes) <= MAX_NAMED_CLASSES:
        for k, name in enumerate(names):
            x, y = np.median(coords[index == k], axis=0)
            ax.annotate(name, (x, y), xytext=(0, 6), textcoords="offset points", fontsize=6, ha="center",
                        va="bottom",
                        bbox=dict(boxstyle="round,pad=0.1", fc="white", ec=colours[k], alpha=0.7, lw=0.8))
    ax.set_xticks([])
    ax.set_yticks([])
    how = {"tsne": "t-SNE", "umap": "UMAP"}.get(method, method or "2-D map")
    lines = [f"{how} of {len(labels):,} embeddings, {len(classes):,} classes"
             + ("" if legend or len(classes) <= MAX_NAMED_CLASSES else " (too many to name)")]
    if title:
        lines.append(str(title))
    ax.set_title(figures.fit_text("\n".join(lines), 8.5, 9), fontsize=9)
    return figures.save(fig, path)


def write(embeddings, labels, out_dir, images=None, class_names=None, distance="euclidean", method="auto",
          max_points=DEFAULT_MAX_POINTS, seed=0, title=None):
    """Write ``projector/`` and ``embedding_map.png`` into ``out_dir`` for at most
    ``max_points`` points (the same points in both, drawn with ``seed``); returns the paths.
    ``images``: optional [N, H, W(, C)] array in [0, 1], or a function ``indices -> images``."""
    embeddings, labels = _check(embeddings, labels)
    keep = subsample(len(labels), max_points, seed)
    shown_images = None
    if images is not None:
        shown_images = np.asarray(images(keep) if callable(images) else np.asarray(images)[keep])
    projector = write_projector(embeddings[keep], labels[keep], os.path.join(out_dir, "projector"),
                                images=shown_images, class_names=class_names)
    coords, used = coordinates(embeddings[keep], method=method, distance=distance, seed=seed)
    picture = plot(coords, labels[keep], os.path.join(out_dir, "embedding_map.png"), class_names=class_names,
                   title=title, method=used)
    return [projector, picture]
