"""A TCP relay that can lose the server's answer after the server committed, as a network
failing between them does: for the tests of an agent recovering a claim whose answer it
never got."""

from __future__ import annotations

import asyncio


class LossyProxy:
    """A TCP relay in front of the server that can lose an answer: after `lose_next_answer()`,
    the next bytes the server sends back are dropped and the agent's connection is closed, as
    when the network fails after the server committed."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.lost = 0
        self._lose = False
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def lose_next_answer(self) -> None:
        self._lose = True

    async def __aenter__(self) -> LossyProxy:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def _relay(self, agent_in: asyncio.StreamReader, agent_out: asyncio.StreamWriter) -> None:
        server_in, server_out = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers |= {agent_out, server_out}

        async def pump(
            source: asyncio.StreamReader, sink: asyncio.StreamWriter, answers: bool
        ) -> None:
            try:
                while data := await source.read(65536):
                    if answers and self._lose:
                        self._lose = False
                        self.lost += 1
                        break
                    sink.write(data)
                    await sink.drain()
            except ConnectionError:
                pass
            finally:
                for writer in (agent_out, server_out):
                    writer.close()
                    self._writers.discard(writer)

        await asyncio.gather(pump(agent_in, server_out, False), pump(server_in, agent_out, True))
