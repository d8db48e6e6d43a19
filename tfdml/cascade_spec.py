"""The taps of an HDC cascade encoder (:func:`tfdml.cascade.build_cascade_encoder`) as a
config states them (``model.cascade``), checked without TensorFlow: the one check that the
library and the config reader (before TensorFlow is imported) share.

A cascade is ``{"levels": K, "layers": "auto"}`` (the ends of the backbone's last K
stages) or ``{"layers": [name, ...]}`` (the layers to tap, shallow to deep; K is their
number, and ``levels``, when given too, must equal it).

No imports.
"""

#: ``layers`` value: tap the end of each of the backbone's last K stages.
AUTO = "auto"
#: K when a cascade does not state it (``levels`` with ``layers="auto"``).
DEFAULT_LEVELS = 3

#: How a cascade is written, shown in every refusal.
CASCADE_FORM = ("a mapping {levels: K, layers: auto} (the ends of the backbone's last K stages; K >= 1, "
                f"default {DEFAULT_LEVELS}) or {{layers: [name, ...]}} (the backbone's layers to tap, shallow "
                "to deep; K is their number); null: one embedding head on the backbone's output")

_KEYS = ("levels", "layers")


def cascade_problem(spec):
    """What is wrong with ``spec`` as a cascade (not None), or None when it has the form of
    :data:`CASCADE_FORM`."""
    if not isinstance(spec, dict):
        return f"must be {CASCADE_FORM}"
    unknown = [key for key in spec if key not in _KEYS]
    if unknown:
        return f"has {', '.join(map(repr, unknown))}, which a cascade does not take (its keys: levels, layers)"
    levels, layers = spec.get("levels"), spec.get("layers", AUTO)
    if levels is not None and (isinstance(levels, bool) or not isinstance(levels, int) or levels < 1):
        return f"has levels = {levels!r}: it must be a positive integer (the number of level embeddings)"
    if isinstance(layers, str):
        if layers != AUTO:
            return f"has layers = {layers!r}: it must be '{AUTO}' or a list of layer names"
        return None
    if not isinstance(layers, (list, tuple)) or not layers or not all(isinstance(n, str) and n for n in layers):
        return f"has layers = {layers!r}: it must be '{AUTO}' or a non-empty list of layer names"
    if levels is not None and levels != len(layers):
        return (f"has levels = {levels} but names {len(layers)} layers: with named layers K is their number; "
                "remove levels (or make it their number)")
    return None


def resolve(spec):
    """``{"levels": K, "layers": "auto" | [names]}`` of a cascade ``spec``; raises
    ``ValueError`` naming the problem and the form (:data:`CASCADE_FORM`)."""
    problem = cascade_problem(spec)
    if problem:
        raise ValueError(f"cascade={spec!r} {problem}.")
    layers = spec.get("layers", AUTO)
    if isinstance(layers, str):
        return {"levels": int(spec.get("levels") or DEFAULT_LEVELS), "layers": AUTO}
    return {"levels": len(layers), "layers": [str(n) for n in layers]}
