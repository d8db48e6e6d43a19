"""Kanji fonts: an offline deep-metric-learning benchmark rendered from installed fonts.

    apt-get install -y fonts-ipafont-gothic fonts-noto-cjk ...   # see study/README.md
    python study/kanji_fonts.py                  # build (or reuse) the 32×32 set of
                                                      # the JIS X 0208 kanji
    python study/kanji_fonts.py --floor          # + raw-pixel R@1, MAP@R, NMI on test
    python study/kanji_fonts.py --chars latin --fonts-dir DIR --out DIR --size 64

A character is a class and a font face is a sample (as SOP's products and
their photos). Every face of every font file under ``--fonts-dir`` (each face
of a ``.ttc`` / ``.otc`` collection is a face of its own; a file reached twice
through symlinks counts once) is asked, through its own cmap (fontTools'
``getBestCmap``, never a coverage list), which of the wanted characters it
maps to a glyph other than ``.notdef``; each is rendered with Pillow's
FreeType (basic layout, anti-aliased, white on black, 8-bit gray), the ink
cropped and centred in a ``size``×``size`` image, scaled down only when the
ink would leave the ``size // 16`` margin. A rendering with no ink is
dropped, and so is one byte-identical to an earlier one of the same class
(faces in sorted path order; collections often hold faces that share their
glyphs). Classes with fewer than ``--min-per-class`` distinct renderings are
dropped.

Split (open set, as in the papers: no class in both halves): a class is in
the test half when the first byte of ``sha256("U+XXXX")`` of its code point
(upper-case hex, at least 4 digits) is odd, else in train. The rule depends on
the code point alone, so a class stays on its side whatever fonts are
installed.

Output (a directory, written with :func:`tfdml.files.atomic_directory`, so a
kill leaves the old set or none, never half of one):

* ``train/U+XXXXX/FFF.png`` and ``test/...``: one folder per class (the code
  point, 5 hex digits so that sorted names are code-point order), one gray PNG
  per face (``FFF``: the face's index in ``manifest.json``'s ``faces``). The
  folder source reads it as it is: ``data: {source: folder, options: {root: DIR}}``
  (``train/`` and ``test/`` are the split).
* ``kanji_fonts.npz``: ``images`` uint8 [N, size, size], ``codepoints`` int32
  [N], ``faces`` int16 [N], ``test`` bool [N], ``face_names`` str [F], in the
  folder's order (train then test, classes by code point, faces by index).
* ``manifest.json``: the fonts (path, sha256, face index, names, Debian package
  and version from ``dpkg-query``), the settings, the counts, the library
  versions that render, and ``checksum``: sha256 over every other file's
  relative path and sha256, in sorted order.

The build is deterministic: the same font files with the same Pillow /
FreeType / zlib give byte-identical files and the same checksum (PNG and .npz
carry no time stamps). Without ``--rebuild`` a set whose checksum still
matches its files and that was built with the same settings and font files is
reused. The default output is ``$XDG_CACHE_HOME/tfdml/kanji_fonts-<size>``
(``~/.cache`` without ``XDG_CACHE_HOME``) for the default ``--chars jis``,
and ``kanji_fonts-<chars>-<size>`` for others.
"""

import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
import time
import warnings
import zipfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

FONT_EXTENSIONS = (".ttf", ".otf", ".ttc", ".otc")
DEFAULT_FONTS_DIR = "/usr/share/fonts"
#: ``cjk``: the CJK Unified Ideographs block (U+4E00-9FFF, 20,992); ``latin``:
#: ASCII letters. ``jis`` (the default, :func:`jis_kanji`) is computed.
CHAR_SETS = {"cjk": ((0x4E00, 0x9FFF),), "latin": ((0x41, 0x5A), (0x61, 0x7A))}
CHAR_SET_NAMES = ("jis", *CHAR_SETS)
DEFAULT_CHARS = "jis"
DEFAULT_MIN_PER_CLASS = 5
NPZ_NAME = "kanji_fonts.npz"
MANIFEST_NAME = "manifest.json"
SPLIT_RULE = ('test when sha256("U+%04X" % codepoint) has an odd first byte, else train '
              "(open set: every class in one half)")
FORMAT_VERSION = 1


class KanjiFontsError(ValueError):
    """A problem of the fonts or the settings, told in one sentence."""


# --------------------------------------------------------------------------- characters, split


def jis_kanji():
    """The 6,355 kanji of JIS X 0208 (level 1: 2,965, level 2: 3,390), the
    Japanese standard set every Japanese font covers: the unified ideographs
    that Python's ``euc_jp`` codec encodes in two bytes with a lead byte
    0xB0-0xF4 (rows 16-84 of the JIS X 0208 table)."""
    points = []
    for cp in range(0x4E00, 0xA000):
        try:
            code = chr(cp).encode("euc_jp")
        except UnicodeEncodeError:
            continue
        if len(code) == 2 and 0xB0 <= code[0] <= 0xF4:
            points.append(cp)
    return points


def parse_chars(spec):
    """Code points [sorted, unique] of ``jis``, ``cjk``, ``latin``, hex ranges
    ``4E00-4EFF,9F8D``, or an iterable of characters / ints."""
    if spec == "jis":
        return jis_kanji()
    if isinstance(spec, str) and spec in CHAR_SETS:
        return [cp for lo, hi in CHAR_SETS[spec] for cp in range(lo, hi + 1)]
    if isinstance(spec, str):
        points = []
        for part in spec.split(","):
            lo, _, hi = part.strip().upper().removeprefix("U+").partition("-")
            try:
                lo, hi = int(lo, 16), int(hi.removeprefix("U+") or lo, 16)
            except ValueError:
                raise KanjiFontsError(
                    f"--chars must be {', '.join(CHAR_SET_NAMES)} or hex ranges such as 4E00-4EFF,9F8D; "
                    f"got {spec!r}.") from None
            if hi < lo:
                raise KanjiFontsError(f"--chars range {part!r} ends before it starts.")
            points += range(lo, hi + 1)
        return sorted(set(points))
    return sorted({ord(c) if isinstance(c, str) else int(c) for c in spec})


def class_name(codepoint):
    """Folder name of a class: ``U+`` and 5 upper-case hex digits (sorts as code points)."""
    return f"U+{codepoint:05X}"


def is_test(codepoint):
    """The fixed open-set split rule (module docstring): True for the test half."""
    return hashlib.sha256(f"U+{codepoint:04X}".encode("ascii")).digest()[0] % 2 == 1


# --------------------------------------------------------------------------- fonts


def find_font_files(fonts_dirs=(DEFAULT_FONTS_DIR,), fonts=()):
    """Sorted font files under ``fonts_dirs`` (recursively) plus ``fonts``; a file
    reached twice (symlinks, alternatives) is kept once, at its first sorted path."""
    found = [os.path.abspath(f) for f in fonts]
    for directory in fonts_dirs:
        if not os.path.isdir(directory):
            raise KanjiFontsError(f"Fonts directory {directory!r} does not exist.")
        for root, dirs, names in os.walk(directory, followlinks=True):
            dirs.sort()
            found += [os.path.join(root, n) for n in sorted(names)
                      if n.lower().endswith(FONT_EXTENSIONS)]
    files, seen = [], set()
    for path in sorted(found):
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        files.append(path)
    return files


def _sha256_file(path, block=1 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(block), b""):
            digest.update(chunk)
    return digest.hexdigest()


def debian_packages(paths):
    """``{path: (package, version)}`` from ``dpkg-query`` for the files a Debian
    package installed; other files (or no dpkg) are left out."""
    out = {}
    try:
        owners = subprocess.run(["dpkg-query", "-S", *paths], capture_output=True, text=True,
                                check=False).stdout
    except OSError:
        return out
    for line in owners.splitlines():
        package, sep, path = line.partition(": ")
        if sep and path in paths:
            out[path] = package.split(":")[0].split(",")[0].strip()
    versions = {}
    for package in sorted(set(out.values())):
        try:
            versions[package] = subprocess.run(
                ["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True,
                text=True, check=False).stdout.strip() or None
        except OSError:
            versions[package] = None
    return {path: (package, versions[package]) for path, package in out.items()}


def read_faces(path):
    """``[(face_index, family, style, cmap)]`` of one font file (every face of a
    collection); ``cmap``: code point -> glyph name, ``.notdef`` left out."""
    from fontTools import ttLib

    with open(path, "rb") as fh:
        collection = fh.read(4) in (b"ttcf",)
    count = len(ttLib.TTCollection(path, lazy=True).fonts) if collection else 1
    faces = []
    for index in range(count):
        font = ttLib.TTFont(path, fontNumber=index if collection else -1, lazy=True)
        cmap = font.getBestCmap() or {}
        names = font["name"] if "name" in font else None
        family = (names.getBestFamilyName() if names else None) or os.path.basename(path)
        style = (names.getBestSubFamilyName() if names else None) or ""
        faces.append((index, str(family), str(style),
                      {cp: g for cp, g in cmap.items() if g != ".notdef"}))
        font.close()
    return faces


# --------------------------------------------------------------------------- rendering


class Renderer:
    """One face rendered centred at ``size``×``size`` (module docstring)."""

    def __init__(self, path, face_index, size):
        self.path, self.face_index, self.size = path, face_index, size
        self.margin = size // 16
        self.box = size - 2 * self.margin
        self._fonts = {}
        self._font(self.box)  # fails here for a font FreeType cannot open

    def _font(self, em):
        from PIL import ImageFont

        if em not in self._fonts:
            self._fonts[em] = ImageFont.truetype(self.path, size=em, index=self.face_index,
                                                 layout_engine=ImageFont.Layout.BASIC)
        return self._fonts[em]

    def _ink(self, char, em):
        from PIL import Image, ImageDraw

        side = 3 * max(em, self.size)
        canvas = Image.new("L", (side, side), 0)
        ImageDraw.Draw(canvas).text((side // 3, side // 3), char, fill=255, font=self._font(em))
        bbox = canvas.getbbox()
        return None if bbox is None else canvas.crop(bbox)

    def render(self, char):
        """uint8 [size, size] of ``char``, or None when the glyph has no ink."""
        from PIL import Image

        em = self.box
        ink = self._ink(char, em)
        while ink is not None and max(ink.size) > self.box and em > 4:
            em = max(4, min(em - 1, em * self.box // max(ink.size)))
            ink = self._ink(char, em)
        if ink is None:
            return None
        if max(ink.size) > self.box:  # a tiny em still overflows: fit by resampling
            scale = self.box / max(ink.size)
            ink = ink.resize((max(1, round(ink.width * scale)), max(1, round(ink.height * scale))),
                             Image.Resampling.LANCZOS)
        image = Image.new("L", (self.size, self.size), 0)
        image.paste(ink, ((self.size - ink.width) // 2, (self.size - ink.height) // 2))
        return np.asarray(image, dtype=np.uint8)


# --------------------------------------------------------------------------- build


def default_out(size, chars=DEFAULT_CHARS):
    """``$XDG_CACHE_HOME/tfdml/kanji_fonts-<size>`` (``~/.cache`` by default)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    tag = "" if chars == DEFAULT_CHARS else f"{chars}-" if isinstance(chars, str) and chars.isalnum() else "custom-"
    return os.path.join(cache, "tfdml", f"kanji_fonts-{tag}{size}")


def directory_checksum(root):
    """sha256 over the relative path and sha256 of every file under ``root``
    except ``manifest.json``, in sorted order."""
    entries = []
    for base, dirs, names in os.walk(root):
        dirs.sort()
        for name in names:
            rel = os.path.relpath(os.path.join(base, name), root).replace(os.sep, "/")
            if rel != MANIFEST_NAME:
                entries.append(rel)
    digest = hashlib.sha256()
    for rel in sorted(entries):
        digest.update(rel.encode("utf-8") + b"\0" + bytes.fromhex(_sha256_file(os.path.join(root, rel))))
    return digest.hexdigest()


def _write_npz(path, arrays):
    """An .npz (``numpy.load`` reads it) with fixed time stamps, so that the same
    arrays give the same bytes (``numpy.savez`` stamps the current time)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buffer.getvalue())


def _library_versions():
    import fontTools
    import PIL
    from PIL import features

    return {"Pillow": PIL.__version__, "FreeType": features.version("freetype2"),
            "fontTools": fontTools.version, "numpy": np.__version__}


def _settings(size, min_per_class, codepoints, chars):
    return {"size": int(size), "min_per_class": int(min_per_class),
            "chars": chars if isinstance(chars, str) else "custom",
            "codepoints_sha256": hashlib.sha256(np.asarray(codepoints, np.int64).tobytes()).hexdigest(),
            "format_version": FORMAT_VERSION}


def _font_key(files):
    return [[path, os.path.getsize(path)] for path in files]


def cached(out, settings, files):
    """The manifest of a valid set at ``out`` (same settings, same font files,
    checksum matching its files), or None."""
    try:
        with open(os.path.join(out, MANIFEST_NAME), encoding="utf-8") as fh:
            manifest = json.load(fh)
    except (OSError, ValueError):
        return None
    if manifest.get("settings") != settings or manifest.get("font_files_key") != _font_key(files):
        return None
    if manifest.get("checksum") != directory_checksum(out):
        return None
    return manifest


def build(out=None, fonts_dirs=(DEFAULT_FONTS_DIR,), fonts=(), size=32,
          min_per_class=DEFAULT_MIN_PER_CLASS, chars=DEFAULT_CHARS, rebuild=False, verbose=True):
    """Build (or reuse) the set at ``out`` and return ``(out, manifest)``.

    ``fonts_dirs``: directories searched for fonts; ``fonts``: more font files.
    ``chars``: ``"jis"``, ``"cjk"``, ``"latin"``, hex ranges (``"4E00-4EFF"``) or an
    iterable of characters. See the module docstring for the rest.
    """
    say = print if verbose else (lambda *a, **k: None)
    if int(size) < 8:
        raise KanjiFontsError(f"--size must be at least 8 pixels, got {size}.")
    if int(min_per_class) < 2:
        raise KanjiFontsError(f"--min-per-class must be at least 2 (retrieval needs a pair), got {min_per_class}.")
    size, min_per_class = int(size), int(min_per_class)
    codepoints = parse_chars(chars)
    if not codepoints:
        raise KanjiFontsError("No characters to render: --chars is empty.")
    wanted = set(codepoints)
    files = find_font_files(fonts_dirs, fonts)
    if not files:
        where = ", ".join([*fonts_dirs, *fonts]) or "(nothing given)"
        raise KanjiFontsError(
            f"No font files ({', '.join(FONT_EXTENSIONS)}) found in {where}; install fonts "
            "(README: the apt-get line of the kanji benchmark) or pass --fonts-dir.")
    out = os.path.abspath(out or default_out(size, chars))
    settings = _settings(size, min_per_class, codepoints, chars)
    if not rebuild:
        manifest = cached(out, settings, files)
        if manifest is not None:
            say(f"Reusing {out} (checksum {manifest['checksum'][:12]}..., --rebuild to build anew).")
            return out, manifest

    start = time.perf_counter()
    packages = debian_packages(files)
    faces, renders = [], {}  # renders: codepoint -> {image bytes: face id}
    rendered = 0
    for number, path in enumerate(files, 1):
        try:
            file_faces = read_faces(path)
            renderers = [Renderer(path, index, size) for index, *_ in file_faces]
        except Exception as err:  # fontTools / FreeType: any failure means "not a usable font"
            warnings.warn(f"Skipping font {path}: it cannot be read ({type(err).__name__}: {err}).",
                          UserWarning, stacklevel=2)
            continue
        package, version = packages.get(path, (None, None))
        digest = _sha256_file(path)
        for (index, family, style, cmap), renderer in zip(file_faces, renderers):
            t0 = time.perf_counter()
            face_id = len(faces)
            todo = sorted(wanted.intersection(cmap))
            new, failed = 0, []
            for cp in todo:
                try:
                    image = renderer.render(chr(cp))
                except OSError as err:  # FreeType on a broken glyph program ("invalid opcode")
                    failed.append((cp, err))
                    continue
                rendered += 1
                if image is None:
                    continue
                seen = renders.setdefault(cp, {})
                key = image.tobytes()
                if key not in seen:
                    seen[key] = face_id
                    new += 1
            if failed:
                warnings.warn(
                    f"Font {path}#{index}: {len(failed)} glyph(s) failed to render and are left out, "
                    f"e.g. {class_name(failed[0][0])} ({failed[0][1]}).", UserWarning, stacklevel=2)
            faces.append({"id": face_id, "path": path, "realpath": os.path.realpath(path),
                          "face_index": index, "family": family,
                          "style": style, "package": package, "package_version": version,
                          "sha256": digest, "mapped": len(todo), "failed": len(failed),
                          "distinct": new})
            say(f"[{number}/{len(files)}] {os.path.basename(path)}#{index} {family} {style}: "
                f"{len(todo)} mapped, {new} distinct, {time.perf_counter() - t0:.1f} s", flush=True)
    if not faces:
        raise KanjiFontsError(f"None of the {len(files)} font file(s) found could be read (see the warnings).")

    kept = sorted(cp for cp, seen in renders.items() if len(seen) >= min_per_class)
    if not kept:
        best = max((len(s) for s in renders.values()), default=0)
        raise KanjiFontsError(
            f"No character has at least {min_per_class} distinct renderings across the {len(faces)} "
            f"face(s) found (the most any has is {best}); install more fonts or lower --min-per-class.")
    split_of = {cp: is_test(cp) for cp in kept}
    if all(split_of.values()) or not any(split_of.values()):
        raise KanjiFontsError(
            f"All {len(kept)} kept classes fall in one half of the fixed split; render more characters.")

    images, cps, face_ids, test = [], [], [], []
    for half in (False, True):
        for cp in kept:
            if split_of[cp] != half:
                continue
            for key, face_id in sorted(renders[cp].items(), key=lambda item: item[1]):
                images.append(np.frombuffer(key, np.uint8).reshape(size, size))
                cps.append(cp)
                face_ids.append(face_id)
                test.append(half)
    images = np.stack(images)
    cps, face_ids, test = (np.asarray(cps, np.int32), np.asarray(face_ids, np.int16),
                           np.asarray(test, bool))
    per_class = np.bincount(np.unique(cps, return_inverse=True)[1])
    render_seconds = time.perf_counter() - start

    from PIL import Image

    from tfdml.files import atomic_directory  # imports TensorFlow (tfdml's __init__): only now

    say(f"Writing {len(images)} images of {len(kept)} classes to {out} ...", flush=True)
    with atomic_directory(out) as tmp:
        for image, cp, face_id, half in zip(images, cps, face_ids, test):
            folder = os.path.join(tmp, "test" if half else "train", class_name(int(cp)))
            os.makedirs(folder, exist_ok=True)
            Image.fromarray(image, mode="L").save(os.path.join(folder, f"{face_id:03d}.png"))
        face_names = np.asarray([f"{f['family']} {f['style']}".strip() for f in faces])
        _write_npz(os.path.join(tmp, NPZ_NAME), {
            "images": images, "codepoints": cps, "faces": face_ids, "test": test,
            "face_names": face_names})
        counts = {
            "classes": len(kept), "images": int(len(images)),
            "train_classes": int(sum(not v for v in split_of.values())),
            "test_classes": int(sum(split_of.values())),
            "train_images": int((~test).sum()), "test_images": int(test.sum()),
            "per_class_min": int(per_class.min()), "per_class_median": float(np.median(per_class)),
            "per_class_max": int(per_class.max()),
            "characters_asked": len(codepoints),
            "characters_rendered": len(renders),
            "glyphs_rendered": rendered,
            "dropped_classes": len(renders) - len(kept),
        }
        manifest = {
            "name": "tfdml kanji fonts",
            "settings": settings,
            "split_rule": SPLIT_RULE,
            "layout": "train/U+XXXXX/FFF.png and test/...; FFF = faces[].id",
            "counts": counts,
            "faces": faces,
            "font_files_key": _font_key(files),
            "libraries": _library_versions(),
            "checksum": directory_checksum(tmp),
        }
        with open(os.path.join(tmp, MANIFEST_NAME), "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, indent=1, ensure_ascii=False)
            fh.write("\n")
    say(f"{counts['classes']} classes ({counts['train_classes']} train, {counts['test_classes']} test), "
        f"{counts['images']} images, {counts['per_class_min']}/{counts['per_class_median']:g}/"
        f"{counts['per_class_max']} per class (min/median/max), from {len(faces)} faces of "
        f"{len({f['path'] for f in faces})} files; {rendered} glyphs rendered in "
        f"{render_seconds:.0f} s, {time.perf_counter() - start:.0f} s in all; checksum "
        f"{manifest['checksum'][:12]}...", flush=True)
    return out, manifest


def load_npz(out):
    """The arrays of a built set (a dict)."""
    with np.load(os.path.join(out, NPZ_NAME), allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


# --------------------------------------------------------------------------- floor


def raw_pixel_floor(out, metrics=("recall", "map@r", "nmi"), ks=(1,), seed=0):
    """Raw-pixel figures of the test split read by the folder source
    (``tfdml_app.evaluation.baseline_metrics("raw_pixels", ...)``: flattened, L2-normalised)."""
    from pipelines import sources
    from tfdml_app import evaluation as evaluate

    split = sources.folder(root=out).split("test")
    return split, evaluate.baseline_metrics("raw_pixels", split, list(metrics), list(ks), seed=seed)


# --------------------------------------------------------------------------- CLI


def build_parser():
    p = argparse.ArgumentParser(
        prog="kanji_fonts.py",
        description="Render an offline kanji-by-font metric-learning benchmark from the installed "
                    "fonts: a character is a class, a font face a sample.",
        epilog=f"Split: {SPLIT_RULE}.")
    p.add_argument("--fonts-dir", action="append", default=None,
                   help=f"directory searched for fonts, repeatable (default {DEFAULT_FONTS_DIR})")
    p.add_argument("--font", action="append", default=[], help="one more font file, repeatable")
    p.add_argument("--size", type=int, default=32, help="image side in pixels (default 32)")
    p.add_argument("--min-per-class", type=int, default=DEFAULT_MIN_PER_CLASS,
                   help="fewest distinct renderings a class keeps (default 5)")
    p.add_argument("--chars", default=DEFAULT_CHARS,
                   help="jis (default: the 6,355 kanji of JIS X 0208), cjk (all of U+4E00-9FFF), "
                        "latin (A-Z a-z) or hex ranges, e.g. 4E00-4FFF,9F8D")
    p.add_argument("--out", default=None,
                   help="output directory (default $XDG_CACHE_HOME or ~/.cache /tfdml/kanji_fonts-SIZE)")
    p.add_argument("--rebuild", action="store_true", help="build even when a valid set is cached")
    p.add_argument("--floor", action="store_true",
                   help="also score raw pixels on the test split (R@1, MAP@R, NMI)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        fonts_dirs = args.fonts_dir if args.fonts_dir is not None else (
            [] if args.font else [DEFAULT_FONTS_DIR])
        out, manifest = build(args.out, fonts_dirs, args.font, args.size, args.min_per_class,
                              args.chars, args.rebuild, verbose=not args.quiet)
    except (KanjiFontsError, OSError) as err:
        print(f"kanji_fonts.py: error: {err}", file=sys.stderr)
        return 2
    print(out)
    if args.floor:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        t0 = time.perf_counter()
        split, results = raw_pixel_floor(out)
        print(f"Raw pixels on the test split ({split.num_classes} classes, {split.num_examples} "
              f"images, {time.perf_counter() - t0:.0f} s):")
        for key in ("recall@1", "map@r", "nmi"):
            print(f"  {key:<8} {results[key]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
