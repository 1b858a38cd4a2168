"""Azure Blob Storage backend for flyte-checkpoint (``abfs://``, ``abfss://``, ``az://``).

Importing this package does not import the Azure SDK: the store is built, and the SDK
imported, when a URI of one of these schemes is first used.
"""

__version__ = "0.1.0"
