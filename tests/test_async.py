"""``await load()`` and ``await save()`` never block the event loop."""

from __future__ import annotations

import asyncio
import os

import flyte_checkpoint as fc

SIZE = 32 * 1024 * 1024


async def _with_ticker(coro) -> tuple[object, int, float]:
    ticks = 0
    longest = 0.0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def ticker():
        nonlocal ticks, longest
        last = loop.time()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = loop.time()
            longest = max(longest, now - last)
            last = now
            ticks += 1

    t = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    before = ticks
    result = await coro
    stop.set()
    await t
    return result, ticks - before, longest


def test_ticker_keeps_running_during_32mib_save_and_load(tmp_path):
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "weights.bin").write_bytes(os.urandom(SIZE))
    dest = str(tmp_path / "obj")

    async def main():
        cp = fc.Checkpoint(dest)
        _, save_ticks, save_gap = await _with_ticker(cp.save(src))
        nxt = fc.Checkpoint(str(tmp_path / "n"), dest)
        path, load_ticks, load_gap = await _with_ticker(nxt.load())
        same = (path / "weights.bin").read_bytes() == (src / "weights.bin").read_bytes()
        nxt.close()
        return save_ticks, save_gap, load_ticks, load_gap, same

    save_ticks, save_gap, load_ticks, load_gap, same = asyncio.run(main())
    assert same
    # A blocked loop cannot tick while the transfer runs (at most once after it); a free one
    # ticks throughout, every 5 ms.
    assert save_ticks >= 3 and load_ticks >= 3, (save_ticks, save_gap, load_ticks, load_gap)


def test_async_bytes_round_trip(tmp_path):
    async def main():
        cp = fc.Checkpoint(str(tmp_path / "a"))
        await cp.save(b"async")
        nxt = fc.Checkpoint(str(tmp_path / "b"), str(tmp_path / "a"))
        path = await nxt.load()
        return path.read_bytes()

    assert asyncio.run(main()) == b"async"
