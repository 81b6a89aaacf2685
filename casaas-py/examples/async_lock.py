"""The same lock from asyncio: async with, and a bounded wait."""

import asyncio
import datetime
import sys
import tempfile

import casaas


async def main(store_url: str) -> None:
    async with casaas.lock(store_url, "locks/async", ttl=datetime.timedelta(seconds=20)) as held:
        print("holding", held.key, "token", held.token)
        try:
            async with casaas.lock(store_url, "locks/async", wait=0):
                pass
        except casaas.LockHeld as e:
            print("second attempt:", e.owner, "holds it")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else f"file://{tempfile.mkdtemp()}"))
