"""Drawing helpers of the PNG plots (:mod:`tfdml.plots`, :mod:`tfdml.embedding_map`):
text fitted to a figure's width, an image in an axis, a coloured frame, and a figure
saved atomically on an Agg canvas (no display, no pyplot state)."""

import os
import textwrap

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg

# Average width of a character of the default font (DejaVu Sans), in ems, with
# a margin: text is wrapped so that its lines fit the figure's width.
_CHAR_EM = 0.62


def fit_text(text, width_inches, fontsize, max_lines=3):
    """``text`` wrapped to lines that fit ``width_inches`` at ``fontsize`` points; at most
    ``max_lines`` lines per paragraph, the last one cut with "…" when it had to be."""
    chars = max(8, int(width_inches * 72 / (_CHAR_EM * fontsize)))
    lines = []
    for paragraph in str(text).split("\n"):
        lines += _cut(paragraph, chars, max_lines)
    return "\n".join(lines)


def _cut(paragraph, chars, max_lines):
    """``paragraph`` wrapped to ``chars`` per line; beyond ``max_lines`` lines it is cut in the
    middle at a comma, keeping its last item (a list's "... (76 classes)")."""
    wrapped = textwrap.wrap(paragraph, chars) or [""]
    if len(wrapped) <= max_lines:
        return wrapped
    tail = paragraph.rsplit(", ", 1)[-1] if ", " in paragraph else ""
    if len(tail) > chars // 2:
        tail = ""
    joint = ", " if tail.startswith(("...", "…")) else ", …, "
    budget = chars * max_lines
    while budget > 0:
        head = paragraph[:budget]
        head = head[:head.rfind(", ")] if ", " in head else head[:-1]
        cut = head + (joint + tail if tail else "…")
        wrapped = textwrap.wrap(cut, chars)
        if len(wrapped) <= max_lines:
            return wrapped
        budget -= max(1, chars // 4)
    return [paragraph[:chars - 1] + "…"]


def short_text(text, width_inches, fontsize):
    """``text`` on one line, cut with "…" to fit ``width_inches``."""
    chars = max(4, int(width_inches * 72 / (_CHAR_EM * fontsize)))
    text = str(text)
    return text if len(text) <= chars else text[:chars - 1] + "…"


def count(n, noun):
    """'1 failure', '3 failures', '2 successes'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}{'es' if noun.endswith('s') else 's'}"


def save(fig, path):
    """``fig`` written to ``path`` (a PNG at 90 dpi, or the format its extension names),
    whole or not at all; its folders made; returns ``path``."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    FigureCanvasAgg(fig)
    from tfdml import files

    with files.atomic_path(path) as tmp:  # a kill never leaves half a PNG
        fig.savefig(tmp, dpi=90, format=os.path.splitext(path)[1].lstrip(".") or "png")
    return path


def show_image(ax, image):
    """``image`` ([H, W] or [H, W, C], values clipped to [0, 1]) in ``ax``, without ticks."""
    image = np.clip(np.asarray(image, np.float32), 0.0, 1.0)
    if image.ndim == 3 and image.shape[-1] == 1:
        image = image[..., 0]
    ax.imshow(image, cmap="gray" if image.ndim == 2 else None, vmin=0.0, vmax=1.0,
              interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])


def frame(ax, color, width=3):
    """A ``color`` border of ``width`` points around ``ax``."""
    for spine in ax.spines.values():
        spine.set_edgecolor(color)
        spine.set_linewidth(width)
