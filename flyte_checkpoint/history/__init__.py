"""Checkpoint history: a manifest beside every object a save commits, the listing of a run's
checkpoints from listings and manifests alone, generations kept within an attempt, and what a
fallback load walks. It sits below :mod:`flyte_checkpoint.checkpoint` (which calls into it) and
above :mod:`flyte_checkpoint.lifecycle`. See docs/history.md."""
