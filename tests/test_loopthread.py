"""flyte_checkpoint.testing.loopthread: the loop the fault proxy and the link proxy run on."""

from __future__ import annotations

import asyncio
import threading

import pytest

from flyte_checkpoint.testing.loopthread import LoopThread


def test_start_returns_with_the_loop_running_so_an_immediate_stop_reaches_it():
    """start() returns once run_forever runs: a stop() right after it always runs the closing
    coroutine and ends the thread (before, it could find the loop not yet running, skip both,
    and wait out the hang guard in join)."""
    for _ in range(50):
        runner = LoopThread("fcp-test-loop", "the test loop")
        opened: list[str] = []
        closed: list[bool] = []

        async def opening(opened: list[str] = opened) -> None:
            opened.append(threading.current_thread().name)

        async def closing(closed: list[bool] = closed) -> None:
            closed.append(True)

        runner.start(opening)
        loop, thread = runner.loop, runner._thread
        assert loop is not None and thread is not None
        assert loop.is_running()
        runner.stop(closing)
        assert opened == ["fcp-test-loop"] and closed == [True]
        assert not thread.is_alive() and loop.is_closed()
        assert runner.loop is None


def test_call_runs_on_the_loops_thread_and_returns_its_result():
    runner = LoopThread("fcp-test-loop", "the test loop")

    async def nothing() -> None:
        return None

    runner.start(nothing)
    try:
        assert runner.call(lambda: threading.current_thread().name) == "fcp-test-loop"
        assert runner.call(lambda: asyncio.get_running_loop() is runner.loop)
    finally:
        runner.stop(nothing)
    runner.stop(nothing)  # stopped: nothing to do


def test_an_error_while_opening_is_raised_by_start_and_leaves_no_thread():
    runner = LoopThread("fcp-test-loop", "the test loop")

    async def failing() -> None:
        raise OSError("no port")

    with pytest.raises(OSError, match="no port"):
        runner.start(failing)
    assert runner.loop is None
    assert not [t for t in threading.enumerate() if t.name == "fcp-test-loop"]
