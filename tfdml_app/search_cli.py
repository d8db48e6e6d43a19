"""Build a search index from a trained model and an image folder, then query it.

    python search.py build --model runs/default/model.keras --images FOLDER --out index.npz
    python search.py query --index index.npz --model runs/default/model.keras IMAGE_OR_FOLDER [-k 10] [--grid out.png]
    python search.py describe index.npz [MORE.npz | FOLDER ...]

``build`` embeds every image under FOLDER (jpg, png, bmp, gif, recursively);
an image's id is its path relative to FOLDER and, when the images sit in
class sub-folders (FOLDER/<class>/<image>), its label is the class folder's
name, so that ``query`` can say whether a neighbour has the query's class.
``query`` prints the k nearest ids with their distances for each query image,
each marked "same class" or "other class: C" when both classes are known (a
query's class: its class sub-folder, as in ``build``, or the folder holding it
when that is a class of the index), and, with ``--grid``, draws each query next
to its neighbours (green border: same class, red: another class). ``describe``
checks every index file given (a folder: the ``.npz`` files under it), reports
each damaged one and goes on, then prints a summary line. The index file
is a :class:`tfdml.search.Index` (``Index.load``); the model is a ``.keras``
file or a SavedModel, as for ``evaluate.py``. Images are resized to the
model's input size (or ``--image-size``) and converted to its channels.

Exit status: 0, or 2 with a one-line message for a problem of the files or
the options (``TFDML_DEBUG=1`` shows the traceback).
"""

import argparse
import os
import sys

from tfdml_app.commands import name
from tfdml_app.embedding import load_embedder
from tfdml_app.errors import EvaluationError
from tfdml.startup import quiet_tensorflow_import


def _image_files(path):
    from pipelines.sources import image_files

    return image_files(path)


def _input_size(embedder, image_size, channels):
    expected = getattr(embedder, "expected_input_shape", None)
    if image_size is None:
        if not expected or len(expected) != 3 or None in expected[:2]:
            raise EvaluationError(
                "The model does not say its input size (a SavedModel); pass --image-size and --channels.")
        image_size = expected[:2]
    elif isinstance(image_size, int):
        image_size = (image_size, image_size)
    if channels is None:
        channels = expected[2] if expected and len(expected) == 3 and expected[2] else 3
    return tuple(image_size), int(channels)


def load_images(files, size, channels):
    from pipelines.sources import load_image_files

    return load_image_files(files, size, channels)


def _embed(embedder, images, batch_size):
    import numpy as np

    out = [np.asarray(embedder(images[i:i + batch_size])) for i in range(0, len(images), batch_size)]
    return np.concatenate(out).astype("float32")


def _class_of(root, path):
    rel = os.path.relpath(path, root)
    parts = rel.split(os.sep)
    return parts[0] if len(parts) > 1 else None


def _query_class(root, path, classes):
    """The class of a query image: its class sub-folder under ``root`` (as in
    ``build``), else the folder holding it when that is one of the index's
    ``classes``; None if unknown."""
    found = _class_of(root, path)
    if found is None:
        found = os.path.basename(os.path.dirname(os.path.abspath(path)))
        return found if found in classes else None
    return found


def build(args):
    from tfdml.search import Index

    embedder = load_embedder(args.model)
    size, channels = _input_size(embedder, args.image_size, args.channels)
    root = args.images
    files = _image_files(root)
    base = root if os.path.isdir(root) else os.path.dirname(root)
    classes = [_class_of(base, f) for f in files]
    labels = classes if all(c is not None for c in classes) else None
    index = Index(distance=args.distance)
    embeddings = []
    for start in range(0, len(files), 512):  # bounded memory for large folders
        chunk = files[start:start + 512]
        embeddings.append(_embed(embedder, load_images(chunk, size, channels), args.batch_size))
        print(f"embedded {start + len(chunk)}/{len(files)} images", file=sys.stderr)
    import numpy as np

    index.add(np.concatenate(embeddings), [os.path.relpath(f, base) for f in files],
              metadata=[{"file": os.path.abspath(f)} for f in files], labels=labels)
    index.save(args.out)
    print(f"Wrote {args.out}: {len(index)} images of {root}"
          + (f", {len(set(labels))} classes" if labels else "") + f", {args.distance} distance.")


def query(args):
    import numpy as np

    from tfdml.search import Index

    index = Index.load(args.index)
    embedder = load_embedder(args.model)
    size, channels = _input_size(embedder, args.image_size, args.channels)
    files = _image_files(args.images)
    images = load_images(files, size, channels)
    ids, distances = index.search(_embed(embedder, images, args.batch_size), k=args.k)
    base = args.images if os.path.isdir(args.images) else os.path.dirname(args.images)
    result_classes = query_classes = None
    if index.labels is not None:  # the index's labels of the results, as strings
        label_of = dict(zip(index.ids.tolist(), [str(c) for c in index.labels.tolist()]))
        result_classes = np.asarray([label_of[i] for i in ids.ravel().tolist()]).reshape(ids.shape)
        query_classes = [_query_class(base, f, set(label_of.values())) for f in files]
    width = max(len(str(i)) for i in ids.ravel().tolist())
    for q, (f, row_ids, row_d) in enumerate(zip(files, ids, distances)):
        known = query_classes is not None and query_classes[q] is not None
        if known:
            same = int(np.sum(result_classes[q] == query_classes[q]))
            print(f"{f}  [class {query_classes[q]}: {same} of {len(row_ids)} neighbours share it]")
        else:
            print(f)
        for rank, (i, d) in enumerate(zip(row_ids, row_d), start=1):
            mark = ""
            if known:
                c = result_classes[q, rank - 1]
                mark = "  same class" if c == query_classes[q] else f"  other class: {c}"
            elif result_classes is not None:
                mark = f"  class {result_classes[q, rank - 1]}"
            print(f"  {rank:>3}  {d:.4f}  {str(i):<{width}}{mark}".rstrip())
    if args.grid:
        stored = index.metadata_for(ids.ravel())
        if not all(isinstance(m, dict) and "file" in m for m in stored):
            raise EvaluationError(
                f"--grid needs an index that records its image files (one built by '{name('search')} build').")
        results = load_images([m["file"] for m in stored], size, channels)
        results = results.reshape(ids.shape + results.shape[1:])
        correct = np.ones(ids.shape, bool)  # a query of unknown class: no red
        known = [q for q, c in enumerate(query_classes or []) if c is not None]
        for q in known:
            correct[q] = result_classes[q] == query_classes[q]
        from tfdml import plots

        plots.retrieval_grid(images, results, correct, args.grid,
                             query_labels=[os.path.basename(f) for f in files],
                             result_labels=[[f"{d:.3f}" for d in row] for row in distances],
                             title=f"{len(files)} queries, {args.k} nearest of {len(index)}"
                             + ("" if len(known) == len(files) else
                                f"; class known for {len(known)} of {len(files)} queries (the others: no red)"))
        print(f"Wrote {args.grid}")


def describe(args):
    from tfdml import search as search_lib

    return search_lib.report_all(args.paths, name("search"))


def build_parser():
    parser = argparse.ArgumentParser(prog=name("search"), description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="embed an image folder into an index file")
    b.add_argument("--model", required=True, help="a .keras file or a SavedModel directory")
    b.add_argument("--images", required=True, help="image folder (FOLDER/<class>/<image> gives labels)")
    b.add_argument("--out", required=True, help="the index file to write (.npz)")
    b.add_argument("--distance", default="euclidean", help="euclidean (default) or cosine")
    q = sub.add_parser("query", help="the k nearest indexed images of an image or a folder of images")
    q.add_argument("--index", required=True, help="an index file written by 'build' or Index.save")
    q.add_argument("--model", required=True, help="the model the index was built with")
    q.add_argument("images", help="an image file or a folder of images")
    q.add_argument("-k", type=int, default=10, help="neighbours per query (default 10)")
    q.add_argument("--grid", help="also draw each query next to its neighbours into this PNG")
    for p in (b, q):
        p.add_argument("--image-size", type=int, default=None, help="resize to N×N (default: the model's)")
        p.add_argument("--channels", type=int, choices=(1, 3), default=None)
        p.add_argument("--batch-size", type=int, default=256)
    d = sub.add_parser("describe", help="check and describe index files (all of them: a damaged one "
                                        "is reported and the others still checked)")
    d.add_argument("paths", nargs="+", metavar="INDEX.npz|FOLDER", help="index files, or folders of them")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    quiet_tensorflow_import()
    from tfdml import errors

    try:
        code = {"build": build, "query": query, "describe": describe}[args.command](args)
    except (EvaluationError, *errors.USER_ERROR_TYPES) as err:
        return errors.report(err, f"{name('search')}: error: ")
    return code or 0

