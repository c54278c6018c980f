"""A model stand-in for bench/inference_auth.py that costs next to nothing: KServe's v1 answer
to any request, precomputed, from a bare asyncio protocol on httptools and uvloop (keep-alive,
pipelining in order; bodies read and dropped). The aiohttp stand-in (`sim.ingress model`)
spends ~60 µs of CPU a request, a single core's worth near the plain chain's rate, so it capped
the baseline; this one leaves the check's cost as the difference.

    python bench/_model_stand_in.py --port P
"""

from __future__ import annotations

import argparse
import asyncio
import json

import httptools
import uvloop

BODY = json.dumps({"model_name": "fraud", "predictions": [[0.25, 0.75]]}).encode()
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(BODY),
    BODY,
)


class Model(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.close()

    def on_message_complete(self) -> None:
        if self.transport is not None:
            self.transport.write(ANSWER)


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Model, "127.0.0.1", port, backlog=1024)
    await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True)
    uvloop.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
