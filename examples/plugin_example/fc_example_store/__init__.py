"""A worked example backend: ``folder://NAME/KEY`` is the file ``ROOT/NAME/KEY``.

``ROOT`` is the ``root`` setting (``FLYTE_CHECKPOINT_FOLDER_ROOT``, or ``configure_store``).
Its modules have the roles, and the names, of the project's cloud plugins' modules.
"""

__version__ = "0.1.0"
