"""What :class:`tfdml.models.EmbeddingModel` does with Keras' private objects, in one place
(each guarded by tests/tfdml/test_models.py::test_private_keras_api_we_rely_on)."""


def release_epoch_iterators(model, traceback, fit_frame):
    """Reset the Keras epoch iterators of a ``fit`` (running in ``fit_frame``) that raised
    the exception of ``traceback``.

    Each epoch iterator holds a suspended generator that refers back to it: left as it
    is, that cycle keeps the tf.data iterator alive after the exception is dropped, until
    a full garbage collection, whose destruction of the iterator then waits for its
    autotuning thread, the longer the later. The iterators are found in the frames
    between the one that raised and ``fit_frame`` (Keras filters its own frames out of
    the traceback, not out of the frames' chain), never above it: an enclosing ``fit``
    keeps its own. ``reset`` drops the generator and the iterator. The validation
    iterator, which Keras keeps on the model until a ``fit`` ends, is dropped too (the
    next ``fit`` or ``evaluate`` makes a new one)."""
    from keras.src.trainers.epoch_iterator import EpochIterator

    while traceback is not None and traceback.tb_next is not None:
        traceback = traceback.tb_next
    below, frame = [], traceback.tb_frame if traceback is not None else None
    while frame is not None and frame is not fit_frame:
        below.append(frame)
        frame = frame.f_back
    for frame in below if frame is fit_frame else []:  # only what ran below this fit
        for value in list(frame.f_locals.values()):
            if isinstance(value, EpochIterator):
                value.reset()
    if getattr(model, "_eval_epoch_iterator", None) is not None:
        model._eval_epoch_iterator.reset()
        model._eval_epoch_iterator = None
