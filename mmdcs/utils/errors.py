"""Exception types of bad input that the tools report as one line (``mmdcs.apis.launch``)."""

__all__ = ['InputError', 'ConfigError']


class InputError(ValueError):
    """Input data a model cannot take as given (e.g. an image size its patch embedding does
    not divide): the message says what to change. ``mmdcs.apis.launch.user_errors`` prints it
    as one line with exit code 2, wherever it is raised (model build, training, testing)."""


class ConfigError(ValueError):
    """A config value that cannot work, found when training starts (a hook's or an optimizer
    constructor's check against the model, the data or the schedule): the message names the
    config key. ``user_errors`` prints it as one line with exit code 2. (Values a constructor
    refuses while mmengine builds the config need no special type: ``user_errors`` finds their
    config key itself.)"""
