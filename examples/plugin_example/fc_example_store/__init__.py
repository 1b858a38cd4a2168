"""A worked example backend: ``folder://name/key`` is the file ``$FOLDER_STORE_ROOT/name/key``."""
