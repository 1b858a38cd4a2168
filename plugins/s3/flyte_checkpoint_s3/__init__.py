"""S3 backend for flyte-checkpoint: ``s3://bucket/key`` and ``s3a://bucket/key``.

Importing this package does not import boto3; the store is built (and boto3
imported) when an S3 URI is first used. See ``flyte_checkpoint_s3.store.S3Store``.
"""

__version__ = "0.1.0"
