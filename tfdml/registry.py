"""One way to name the replaceable parts: a :class:`Registry` of name → object.

Losses (:data:`tfdml.losses.LOSSES`), samplers (:data:`tfdml.samplers.SAMPLERS`),
backbones (:data:`tfdml.backbones.BACKBONES`), and on the data side batch designs
(:data:`pipelines.designs.DESIGNS`) and sources (:data:`pipelines.sources.SOURCES`)
are each one registry, so a part added from outside the library is found by name
exactly as a built-in::

    @tfdml.samplers.register("my_sampler")
    class MySampler(tfdml.samplers.Sampler): ...

A registry is a mapping (``REG[name]``, ``name in REG``, ``sorted(REG)``, in
registration order), refuses a second object under a taken name (naming the
one it holds), and :meth:`Registry.build` makes a part from a name (or passes
an already-made part through) with a "did you mean" error listing the valid
names. No dependencies (not even tfdml's other modules): the data side
(``pipelines``) imports this module, and nothing else of tfdml.
"""

import collections.abc
import difflib


def did_you_mean(name, valid):
    """``" (did you mean 'x'?)"`` for the closest of ``valid`` names, or ``""``."""
    close = difflib.get_close_matches(str(name), [str(v) for v in valid], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class Registry(collections.abc.MutableMapping):
    """Names (Python identifiers) → objects of one kind of part.

    Args:
      kind: what the entries are, for messages ("loss", "sampler", ...).
      check: ``check(name, obj)`` raising ``ValueError`` when ``obj`` is not of
        this kind (e.g. not a subclass of the base class), or ``None``.
      on_register: ``on_register(name, obj)`` returning the object to store,
        called once per new entry (e.g. Keras serialisation registration), or
        ``None``.
      make: ``make(obj, **kwargs)`` making the part from an entry in
        :meth:`build` (default: ``obj(**kwargs)``).
      instances: a type (or tuple of types) of already-made parts, which
        :meth:`build` returns as they are.

    Item assignment (``REG[name] = obj``, ``pytest``'s ``monkeypatch.setitem``)
    stores without the checks of :meth:`register`; deletion removes an entry.
    """

    def __init__(self, kind, check=None, on_register=None, make=None, instances=()):
        self.kind = kind
        self._check = check
        self._on_register = on_register
        self._make = make
        self._instances = instances
        self._entries = {}

    # -- Mapping ---------------------------------------------------------------
    def __getitem__(self, name):
        return self._entries[name]

    def __setitem__(self, name, obj):
        self._entries[name] = obj

    def __delitem__(self, name):
        del self._entries[name]

    def __iter__(self):
        return iter(self._entries)

    def __len__(self):
        return len(self._entries)

    def __repr__(self):
        return f"Registry({self.kind!r}: {', '.join(self._entries)})"

    # -- registering -----------------------------------------------------------
    def register(self, name):
        """Decorator: add the decorated object under ``name`` and return it.

        Raises ``ValueError`` for a name that is not a Python identifier, an
        object the registry's check refuses, or a name that already holds
        another object (registering the same object again is harmless)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"A {self.kind} name must be a Python identifier, got {name!r}.")

        def decorate(obj):
            if self._check is not None:
                self._check(name, obj)
            held = self._entries.get(name)
            if held is not None and held is not obj:
                raise ValueError(
                    f"A {self.kind} named {name!r} is already registered "
                    f"({getattr(held, '__name__', repr(held))}); choose another name."
                )
            if held is None and self._on_register is not None:
                obj = self._on_register(name, obj)
            self._entries[name] = obj
            return obj

        return decorate

    # -- looking up ------------------------------------------------------------
    def unknown(self, name):
        """The ``ValueError`` for a name that is not registered: the closest name and all of them."""
        return ValueError(
            f"Unknown {self.kind} {name!r}{did_you_mean(name, self._entries)}; "
            f"choose one of {', '.join(self._entries)}."
        )

    def lookup(self, name):
        """The entry named ``name``, or :meth:`unknown`'s error."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise self.unknown(name) from None

    def build(self, identifier, **kwargs):
        """The part named ``identifier`` made with ``kwargs``, or ``identifier`` itself
        when it is already a part (an instance of ``instances``).

        (``get`` keeps its ``Mapping`` meaning: the entry or a default.)"""
        if self._instances and isinstance(identifier, self._instances):
            if kwargs:
                raise ValueError(
                    f"Arguments {sorted(kwargs)} apply to a {self.kind} name, not to the "
                    f"{self.kind} object {identifier!r}; set them when making it."
                )
            return identifier
        entry = self.lookup(identifier)
        if self._make is not None:
            return self._make(entry, **kwargs)
        return entry(**kwargs)


def keras_serializable(package="tfdml_user"):
    """An ``on_register`` hook for parts that Keras saves (losses, samplers): a class
    not yet known to Keras is registered under ``package``, so a saved model that
    uses it loads; a class Keras already knows keeps its registered name (and the
    files saved with it keep loading). Keras is imported only when the hook runs."""

    def hook(name, cls):
        import keras

        if keras.saving.get_registered_object(keras.saving.get_registered_name(cls)) is cls:
            return cls
        return keras.saving.register_keras_serializable(package=package)(cls)

    return hook
