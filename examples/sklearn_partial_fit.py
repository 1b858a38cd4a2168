"""scikit-learn ``partial_fit``: learn from a stream of batches, checkpointing model and progress.

An ``SGDClassifier`` learns from 12 batches of a synthetic data set, one ``partial_fit`` per
batch. After each batch the estimator and the index of the next batch are pickled into one
bytes checkpoint. Simulated crashes (default: at batches 4 and 9) end an attempt; the next
attempt unpickles the estimator and continues with the batch it had not learned yet, so the
final model equals that of a run without crashes.

Only load pickles you wrote yourself: a pickle runs code when it is loaded.

Run: python examples/sklearn_partial_fit.py [--batches 12] [--crash-at 4,9]
Needs: pip install scikit-learn
"""

from __future__ import annotations

import argparse
import pickle

import numpy as np
from sklearn.datasets import make_classification
from sklearn.linear_model import SGDClassifier

import flyte_checkpoint as fc

CRASHED: set[int] = set()
CLASSES = np.array([0, 1])


def batches(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    x, y = make_classification(n_samples=n * 50, n_features=8, random_state=0)
    return [(x[i * 50 : (i + 1) * 50], y[i * 50 : (i + 1) * 50]) for i in range(n)]


def learn(n_batches: int, crash_at: set[int]) -> SGDClassifier:
    cp = fc.ctx().checkpoint
    restored = cp.load_sync()
    if restored is not None:
        state = pickle.loads(restored.read_bytes())
        model, start = state["model"], state["next_batch"]
    else:
        model, start = SGDClassifier(random_state=0), 0
    print(f"attempt {fc.ctx().attempt_number}: starting at batch {start}")
    data = batches(n_batches)
    for i in range(start, n_batches):
        if i in crash_at and i not in CRASHED:
            CRASHED.add(i)
            print(f"  CRASH at batch {i} (simulated)")
            raise RuntimeError(f"simulated crash at batch {i}")
        x, y = data[i]
        model.partial_fit(x, y, classes=CLASSES)
        cp.save_sync(pickle.dumps({"model": model, "next_batch": i + 1}))
        print(f"  batch {i}: accuracy so far {model.score(x, y):.2f}, checkpoint saved")
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--crash-at", default="4,9", help="comma-separated batches ('' for none)")
    args = parser.parse_args()
    crash_at = {int(b) for b in args.crash_at.split(",") if b.strip()}
    model = fc.task(retries=len(crash_at))(learn)(args.batches, crash_at)
    print(f"learned {args.batches} batches with {len(CRASHED)} crashes")
    print(f"final coefficients: {model.coef_.ravel().tolist()!r} intercept: {model.intercept_.tolist()!r}")


if __name__ == "__main__":
    main()
