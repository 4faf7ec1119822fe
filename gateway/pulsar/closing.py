"""``async with`` for the objects of this package that are closed by ``aclose``."""

from __future__ import annotations

from typing import Self


class AsyncClosing:
    """A mixin: ``async with`` gives the object itself and closes it with ``aclose`` on the
    way out, however the block ends."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
