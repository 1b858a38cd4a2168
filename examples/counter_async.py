"""The counter of counter_sync.py as an ``async def`` task: ``await load()`` / ``await save()``.

Run: python examples/counter_async.py
"""

from __future__ import annotations

import asyncio

import flyte_checkpoint as fc


@fc.task(retries=3)
async def count(n: int) -> int:
    cp = fc.ctx().checkpoint
    path = await cp.load()
    start = int(path.read_bytes()) if path else 0
    print(f"attempt {fc.ctx().attempt_number}: starting at {start}")
    for i in range(start, n):
        if i > start and i % 3 == 0:
            raise RuntimeError(f"simulated crash at step {i}")
        await cp.save(str(i + 1).encode())
    return n


if __name__ == "__main__":
    print("result:", asyncio.run(count(10)))
