"""The application's errors: a problem of the user's run or evaluation (data,
config, model file, resume, NaN), reported as one line that names the fix."""


class ExperimentError(RuntimeError):
    """A problem with the run (data, resume, NaN) with a message naming the fix."""


class EvaluationError(Exception):
    """A problem with the user's input, reported as one line without a stack trace."""
