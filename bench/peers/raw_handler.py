"""The limit with a Python handler: the raw limit's batched claims and finishes, with every
execution running the handler pgsched's benchmark app runs.

Claims are exactly the raw limit's (``bench.peers.raw``: one ``INSERT ... SELECT FROM
unnest(...) ON CONFLICT DO NOTHING RETURNING`` per 5,000 rows, replicas starting at
different batches); but instead of one batched ledger INSERT, each won row starts one
coroutine running :func:`bench.peers.common.handler` (one INSERT into the ledger through the
same :class:`~bench.peers.common.AsyncLedger` of ``ledger_pool`` connections that pgsched's
app uses), and once all of a batch's handlers are done the batch is finished with the raw
limit's one ``UPDATE ... WHERE id = ANY(...)`` on a second connection. The next batch is
claimed while the previous one's handlers run, as pgsched starts a claimed batch before
claiming the next. No leases, heartbeats, overlap checks, slot limit or per-run bookkeeping:
the ceiling of any scheduler that runs a Python handler per plan.
"""

from __future__ import annotations

import asyncio

import psycopg

from bench.peers import common
from bench.peers.raw import Claimed, Conn, Replica


class HandlerReplica(Replica):
    """A raw replica that settles a claimed batch with one handler coroutine per row."""

    def __init__(self, cfg: common.Config) -> None:
        super().__init__(cfg)
        self.ledger = common.AsyncLedger(cfg)
        self.settling: set[asyncio.Task[None]] = set()
        self.finisher: Conn | None = None

    async def open(self) -> None:
        self.finisher = await psycopg.AsyncConnection.connect(self.cfg.dsn, autocommit=True)

    async def close(self) -> None:
        if self.settling:
            await asyncio.wait(self.settling, timeout=30)
        if self.finisher is not None:
            await self.finisher.close()

    async def settle(self, conn: Conn, rows: Claimed) -> None:
        handlers = [
            asyncio.create_task(common.handler(self.ledger, scope, plan)) for _, scope, plan in rows
        ]
        task = asyncio.create_task(self.finish_when_done(handlers, rows))
        self.settling.add(task)
        task.add_done_callback(self.settling.discard)

    async def finish_when_done(self, handlers: list[asyncio.Task[None]], rows: Claimed) -> None:
        await asyncio.gather(*handlers, return_exceptions=True)
        assert self.finisher is not None
        await self.finish(self.finisher, rows)


if __name__ == "__main__":
    asyncio.run(HandlerReplica(common.config()).main())
