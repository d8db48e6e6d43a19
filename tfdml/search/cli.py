"""``python -m tfdml.search INDEX.npz|FOLDER ...``: check and describe index files
(:func:`describe`, :func:`describe_all`; ``search.py describe`` prints the same)."""

import os

from tfdml.search import fileformat
from tfdml.search.entries import kind
from tfdml.search.index import Index


def describe(path):
    """A one-paragraph description of the index file ``path`` (checksum verified)."""
    manifest, _ = fileformat.read(path)
    index = Index.load(path, backend="tensorflow")  # describing needs no faiss
    id_kind = kind(index.ids) if len(index) else "none"
    labels = "none" if index.labels is None else kind(index.labels)
    saved = fileformat.search_settings(manifest)
    search = f"search: {saved.get('backend', 'tensorflow')}"
    if saved.get("approximate"):
        params = ", ".join(f"{k}={v}" for k, v in saved.items()
                           if k not in ("backend", "approximate") and v is not None)
        search += f" approximate {saved['approximate']}" + (f" ({params})" if params else "")
    else:
        search += " exact"
    return (f"{path}: {len(index)} entries, dim {index.dim}, distance {index.distance}, "
            f"{id_kind} ids, labels: {labels}, {search}, format version {fileformat.FORMAT_VERSION}, "
            "checksum ok")


def describe_all(paths):
    """Describe every index file of ``paths`` (a folder: the ``.npz`` files under it),
    going on past damaged ones. Yields ``(path, description, None)`` or ``(path,
    None, error message)``, then ``(None, summary line, None)``; see :func:`describe`."""
    ok = bad = 0
    for given in paths:
        given = os.fspath(given)
        found = [given]
        if os.path.isdir(given):
            found = sorted(os.path.join(d, f) for d, _, names in os.walk(given)
                           for f in names if f.endswith(".npz"))
            if not found:
                bad += 1
                yield given, None, f"{given} holds no .npz index files."
                continue
        for path in found:
            try:
                text = describe(path)
            except (ValueError, OSError) as err:
                bad += 1
                yield path, None, str(err) if path in str(err) else f"{path}: {err}"
            else:
                ok += 1
                yield path, text, None
    total = ok + bad
    yield None, (f"{total} index file{'s' if total != 1 else ''}: {ok} ok"
                 + (f", {bad} bad" if bad else "")), None


def report_all(paths, prog):
    """Print :func:`describe_all` (errors on stderr, prefixed with ``prog``); the exit
    status: 0 if every file is a sound index, else 2."""
    import sys

    code = 0
    for path, text, error in describe_all(paths):
        if error is not None:
            print(f"{prog}: error: {error}", file=sys.stderr)
            code = 2
        else:
            print(text)
    return code


def main(argv=None):
    """``python -m tfdml.search INDEX.npz|FOLDER ...``: describe index files (exit 2 if
    one is damaged)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tfdml.search",
                                     description="Check and describe tfdml.search index files.")
    parser.add_argument("paths", nargs="+", metavar="INDEX.npz|FOLDER")
    args = parser.parse_args(argv)
    return report_all(args.paths, "python -m tfdml.search")
