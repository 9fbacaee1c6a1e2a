"""A server that stops answering while its sockets stay open (behind a proxy that keeps
acknowledging TCP) is left within the connection's answer_timeout plus the probe's timeout:
the wait ends with :class:`NoAnswer` naming the host, the connection is dropped, and a pool's
new connections try that host last. A server that is only slow is waited for: its host
reacts to the probe. The proxy is tests/support/proxy.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgsched._storage.answering import (
    PROBE_TIMEOUT_S,
    BoundedAsyncConnection,
    BoundedConnection,
    NoAnswer,
    host_reacts,
)
from pgsched._storage.connection import make_pool, pooled
from pgsched._storage.store import Store
from tests.support.proxy import TcpProxy

BOUND_S = 1.0
# A guard against waiting on the silent server's TCP timeouts (minutes), not a figure.
WITHIN_S = BOUND_S + PROBE_TIMEOUT_S + 3


@pytest.fixture
def proxy(pg_dsn: str) -> Iterator[TcpProxy]:
    port = int(conninfo_to_dict(pg_dsn).get("port") or 5432)
    proxy = TcpProxy(port)
    yield proxy
    proxy.close()


def _via(pg_dsn: str, proxy: TcpProxy) -> str:
    return make_conninfo(pg_dsn, host="127.0.0.1", port=str(proxy.port))


def test_a_silent_server_is_left_within_the_answer_timeout(pg_dsn: str, proxy: TcpProxy) -> None:
    asyncio.run(_a_silent_server_is_left_within_the_answer_timeout(pg_dsn, proxy))


async def _a_silent_server_is_left_within_the_answer_timeout(pg_dsn: str, proxy: TcpProxy) -> None:
    conn = await BoundedAsyncConnection.connect(_via(pg_dsn, proxy), autocommit=True)
    conn.answer_timeout = BOUND_S
    assert (await (await conn.execute("SELECT 1")).fetchone()) == (1,)
    proxy.blackhole(True)
    started = time.monotonic()
    with pytest.raises(NoAnswer, match=rf"no answer from 127\.0\.0\.1:{proxy.port} within 1 s"):
        await conn.execute("SELECT 2")
    assert BOUND_S <= time.monotonic() - started < WITHIN_S
    assert conn.broken or conn.closed
    await conn.close()


def test_a_slow_answer_past_the_bound_is_waited_for(pg_dsn: str, proxy: TcpProxy) -> None:
    asyncio.run(_slow_answer_past_the_bound_is_waited_for(pg_dsn, proxy))


async def _slow_answer_past_the_bound_is_waited_for(pg_dsn: str, proxy: TcpProxy) -> None:
    """The statement outlasts the bound twice over, but the host reacts to each probe."""
    async with await BoundedAsyncConnection.connect(_via(pg_dsn, proxy), autocommit=True) as conn:
        conn.answer_timeout = 0.3
        row = await (await conn.execute("SELECT 7 FROM pg_sleep(1)")).fetchone()
        assert row == (7,)
        assert conn.silent is None


def test_the_probe_tells_a_silent_host_from_a_live_one(pg_dsn: str, proxy: TcpProxy) -> None:
    assert host_reacts("127.0.0.1", proxy.port)
    proxy.blackhole(True)
    assert not host_reacts("127.0.0.1", proxy.port, timeout=0.5)


def test_a_worker_threads_connection_is_bounded_too(pg_dsn: str, proxy: TcpProxy) -> None:
    conn = BoundedConnection.connect(_via(pg_dsn, proxy), autocommit=True)
    conn.answer_timeout = BOUND_S
    conn.execute("SELECT 1")
    proxy.blackhole(True)
    started = time.monotonic()
    with pytest.raises(NoAnswer):
        conn.execute("SELECT 2")
    assert time.monotonic() - started < WITHIN_S
    conn.close()


def test_a_pool_tries_a_silent_host_last(pg_dsn: str, proxy: TcpProxy) -> None:
    asyncio.run(_a_pool_tries_a_silent_host_last(pg_dsn, proxy))


async def _a_pool_tries_a_silent_host_last(pg_dsn: str, proxy: TcpProxy) -> None:
    """The DSN names the proxy first and the server itself second: once the proxy goes
    silent, the next borrow reaches the server directly within the bound, instead of waiting
    on the silent host (and its connect_timeout)."""
    direct = conninfo_to_dict(pg_dsn)
    port = str(direct.get("port") or 5432)
    dsn = make_conninfo(pg_dsn, host="127.0.0.1,localhost", port=f"{proxy.port},{port}")
    pool = make_pool(
        dsn,
        store=Store("pgsched"),
        app_name="pgsched-answer-test",
        transaction_pooling=False,
        min_size=1,
        max_size=2,
        timeout=10,
        answer_timeout=BOUND_S,
    )
    async with pool:
        async with pooled(pool) as conn:
            assert conn.info.port == proxy.port
        proxy.blackhole(True)
        started = time.monotonic()
        # The pool's check of its idle connection gets no answer: that connection is
        # dropped and a new one, steered past the silent host, is lent instead.
        async with pooled(pool) as conn:
            assert conn.info.host == "localhost"
            await conn.execute("SELECT 1")
        assert time.monotonic() - started < WITHIN_S


def test_an_operator_borrow_waits_for_its_own_bound(pg_dsn: str, proxy: TcpProxy) -> None:
    asyncio.run(_an_operator_borrow_waits_for_its_own_bound(pg_dsn, proxy))


async def _an_operator_borrow_waits_for_its_own_bound(pg_dsn: str, proxy: TcpProxy) -> None:
    """The pool's bound is the engine's; a borrow that gives its own (an operator's, longer)
    is not cut at the pool's."""
    pool = make_pool(
        _via(pg_dsn, proxy),
        store=Store("pgsched"),
        app_name="pgsched-answer-test",
        transaction_pooling=False,
        min_size=1,
        max_size=1,
        timeout=10,
        answer_timeout=0.2,
    )
    operator_bound = 2.0
    async with pool:
        with pytest.raises(NoAnswer):
            async with pooled(pool, operator_bound) as conn:
                proxy.blackhole(True)
                started = time.monotonic()
                await conn.execute("SELECT 1")
        assert time.monotonic() - started >= operator_bound
