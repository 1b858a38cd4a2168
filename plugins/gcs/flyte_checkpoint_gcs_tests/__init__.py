"""Tests of flyte-checkpoint-gcs, run against a GCS emulator started on 127.0.0.1."""
