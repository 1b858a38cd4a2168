"""Count to 10 with 3 retries, crashing every third step; each attempt resumes from the last save.

Run: python examples/counter_sync.py     (prints where each attempt starts: 0, 3, 6, 9)
"""

from __future__ import annotations

import flyte_checkpoint as fc


@fc.task(retries=3)
def count(n: int) -> int:
    cp = fc.ctx().checkpoint
    path = cp.load_sync()  # None on the first attempt
    start = int(path.read_bytes()) if path else 0
    print(f"attempt {fc.ctx().attempt_number}: starting at {start}")
    for i in range(start, n):
        if i > start and i % 3 == 0:
            raise RuntimeError(f"simulated crash at step {i}")
        cp.save_sync(str(i + 1).encode())
    return n


if __name__ == "__main__":
    print("result:", count(10))
