"""The data side of a run: the config's ``data`` and ``image`` sections turned
into :mod:`pipelines` sources, splits, designs and tf.data batches."""

import inspect

import tensorflow as tf

from tfdml_app import config as config_lib
from tfdml_app.errors import ExperimentError


def check_source_options(cfg):
    """Refuse ``data.options`` that the source does not take, or lacks, naming
    the source's options (before any work: the options are the source
    function's keyword arguments)."""
    from pipelines import sources

    name, options = cfg["data"]["source"], cfg["data"]["options"]
    parameters = inspect.signature(sources.SOURCES[name]).parameters
    unknown = sorted(set(options) - set(parameters))
    missing = [p for p, spec in parameters.items() if spec.default is spec.empty and p not in options]
    if unknown:
        hint = "".join(config_lib.suggest(k, list(parameters)) for k in unknown[:1])
        raise ExperimentError(
            f"data.options {unknown} are not options of the {name!r} source{hint}; "
            f"its options: {', '.join(parameters)}."
        )
    if name == "folder" and "root" not in options and not {"train_root", "test_root"} <= set(options):
        raise ExperimentError(
            "data.options of the 'folder' source needs root (root/<class>/<image>, or root/train/<class> "
            "and root/test/<class>), or both train_root and test_root."
        )
    if missing:
        raise ExperimentError(
            f"data.options lacks {missing} for the {name!r} source (e.g. data.options.{missing[0]}: ...); "
            f"its options: {', '.join(parameters)}."
        )


#: Sources that decode image files, and their options that image.size /
#: image.channels give when data.options does not.
IMAGE_FILE_OPTIONS = {"size": "image_size", "channels": "channels"}


def source_options(cfg):
    """``data.options``, completed from ``image.size`` / ``image.channels`` for
    the sources that decode image files (folder, tfds): one place for the image
    settings. An option given in ``data.options`` wins (e.g. tfds benchmarks
    load at 256 px, and image.size 224 is the model's input, cropped from it)."""
    return image_source_options(cfg["data"]["source"], cfg["data"]["options"], cfg["image"])


def image_source_options(source, options, image):
    """``options`` of ``source`` completed from the ``image`` section (also
    used by evaluate.py --config, so both load the files alike)."""
    from pipelines import sources

    options = dict(options or {})
    if source not in sources.SOURCES:
        return options
    parameters = inspect.signature(sources.SOURCES[source]).parameters
    for key, option in IMAGE_FILE_OPTIONS.items():
        if option in parameters and option not in options and image.get(key) is not None:
            options[option] = image[key]
    return options


def build_source(cfg):
    from pipelines import sources

    try:
        return sources.get_source(cfg["data"]["source"], **source_options(cfg))
    except (ValueError, FileNotFoundError, ImportError) as err:
        raise ExperimentError(f"data: {err}") from None


def build_design(cfg):
    from pipelines import designs

    section = cfg["design"]
    cls = designs.DESIGNS[section["name"]]  # a registered name: the config is validated
    unknown = sorted(set(section["options"]) - set(cls.option_names()))
    if unknown:
        raise ExperimentError(
            f"design.options {unknown} are not options of the {section['name']!r} design "
            f"({cls.__name__}: {', '.join(cls.option_names())}); remove them or choose another design."
        )
    try:
        return cls.from_config(section["options"])
    except ValueError as err:
        raise ExperimentError(f"design: {err}") from None


def input_shape_for(cfg, split_shape):
    """The model's input shape: the split's images after ``image.size`` / ``image.channels``."""
    shape = tuple(split_shape)
    if len(shape) != 3:  # feature vectors (the arrays source): nothing to resize
        return shape
    h, w, c = shape
    size, channels = cfg["image"]["size"], cfg["image"]["channels"]
    return (size or h, size or w, channels or c)


def model_input(cfg):
    """Per-batch map to the model's channels and size (pipelines.augment.to_model_input)."""
    from pipelines import augment

    size, channels = cfg["image"]["size"], cfg["image"]["channels"]

    def transform(x):
        if (channels is None and size is None) or x.shape.rank != 4:
            return x
        return augment.to_model_input(x, channels=channels or x.shape[-1], size=size)

    return transform


def train_dataset(cfg, design, split, skip_batches=0):
    """Infinite training batches ``(x, columns)`` from the design, seeded.

    With ``image.augment`` each batch gets the papers' random crop and
    horizontal flip (Wu §5, Hong §6), seeded by (seed, step).
    """
    from pipelines import augment

    augmentation = None
    if cfg["image"]["augment"]:
        size = input_shape_for(cfg, split.image_shape)[:2]
        augmentation = augment.TrainTransform(
            size=size, scale=tuple(cfg["image"]["crop_scale"]), flip=cfg["image"]["flip"]
        )
    try:
        ds = design.batches(split, seed=cfg["seed"], transform=augmentation, prefetch=False)
    except ValueError as err:
        raise ExperimentError(f"design: {err}") from None
    if skip_batches:
        ds = ds.skip(skip_batches)
    to_input = model_input(cfg)
    ds = ds.map(lambda x, y: (to_input(x), y), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def eval_dataset(cfg, split):
    """Batched ``(x, label)`` of a split, in order, for embedding."""
    to_input = model_input(cfg)
    batch = cfg["evaluation"]["batch_size"]
    ds = split.dataset().batch(batch)
    # A known length lets Keras' predict stop without an "input ran out" warning.
    ds = ds.apply(tf.data.experimental.assert_cardinality(-(-int(split.num_examples) // batch)))
    return ds.map(lambda x, y: (to_input(x), y)).prefetch(tf.data.AUTOTUNE)


def split_validation(cfg, train_split):
    """``(train, validation)``: the training split without the held-out part
    of ``data.validation``, and that part (None when no fraction is set)."""
    from pipelines import sources

    v = cfg["data"]["validation"]
    if v["fraction"] is None:
        return train_split, None
    try:
        return sources.hold_out(train_split, v["fraction"], mode=v["mode"], seed=v["seed"])
    except ValueError as err:
        raise ExperimentError(f"data.validation: {err}") from None


def describe_data(cfg, train_split, val_split, test_split):
    """What the run trains and evaluates on, as a JSON-able dict (metrics.json's
    ``info.data``, finished.json, the summary before training): classes and
    images of each split, the validation split's classes by name, and the
    images' shape as read and as the model takes them."""
    def split(s):
        return {"classes": int(s.num_classes), "images": int(s.num_examples)}

    out = {"source": cfg["data"]["source"], "image_shape": list(train_split.image_shape),
           "model_input": list(input_shape_for(cfg, train_split.image_shape)),
           "train": split(train_split), "validation": None, "test": split(test_split)}
    if val_split is not None:
        v = cfg["data"]["validation"]
        out["validation"] = {**split(val_split),
                             "class_names": [str(n) for n in val_split.class_names.values()],
                             "mode": v["mode"], "fraction": v["fraction"], "seed": v["seed"]}
    return out
