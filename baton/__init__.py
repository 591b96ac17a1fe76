"""Baton: the control plane for large AI-training clusters beside Kubernetes.

The installed package. In the repository its parts stay where a reader looks for them
(``libs/``, ``proto/``, ``services/`` at the top); ``baton/libs``, ``baton/proto`` and
``baton/services`` are links to them, so that Baton installs as one top-level package
and never collides with other ``libs``, ``services`` or ``proto`` packages (``proto``
is proto-plus's import name, used by Google's client libraries).
"""
