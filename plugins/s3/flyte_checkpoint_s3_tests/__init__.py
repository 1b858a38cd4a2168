"""Tests of flyte-checkpoint-s3 against a moto S3 server the fixtures start (not in the wheel)."""
