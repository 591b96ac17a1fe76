"""The error a setting that cannot be used raises, wherever it is read (settings, nkeys)."""


class SettingsError(ValueError):
    """A setting that is missing, unknown or of the wrong type; the message names the key."""
