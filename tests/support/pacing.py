"""A fake clock for pacing tests: time moves only when a test moves it."""

from __future__ import annotations

import asyncio


class FakeClock:
    def __init__(self, start: float = 1_000_000.0) -> None:
        self.t = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.t += seconds
        await asyncio.sleep(0)

    def advance(self, seconds: float) -> None:
        self.t += seconds
