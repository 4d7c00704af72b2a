"""Pools, sync and through .aio."""

from __future__ import annotations

import asyncio

import pytest

from sandweave import NotFound, Pool, Sandbox, UsageError


def test_pool_sync(state_dir: str) -> None:
    with Pool(template="base", size=2, hidepid=2, audit=True) as pool:
        assert pool.name.startswith("sdk-")
        assert pool.info["warm"] == 2 and pool.size == 2
        assert pool.info["options"]["hidepid"] == 2 and pool.info["options"]["audit"] is True
        env = pool.acquire()
        try:
            assert isinstance(env, Sandbox)
            assert env.info["pool"]["name"] == pool.name and env.info["pool"]["state"] == "acquired"
            assert isinstance(env.info["pool"].get("acquired_audit_seq"), int)
            opts = env.spec["runtime_options"]
            assert opts["hidepid"] == 2 and opts["audit"] is True
            assert env.run("id -u", user="1001:1001").stdout == "1001\n"
        finally:
            env.terminate()
            env.close()  # acquired: ours to remove
        info = pool.resize(1)
        assert info["size"] == 1 and pool.size == 1
        assert pool.inspect()["size"] == 1
        same = Pool.from_name(pool.name)
        assert same.name == pool.name
        same.close()  # not owned: the pool stays
        assert pool.inspect()["name"] == pool.name
    with pytest.raises(NotFound):
        Pool.from_name(pool.name)


def test_pool_names_are_unique(state_dir: str) -> None:
    with Pool(template="base", size=0) as a, Pool(template="base", size=0) as b:
        assert a.name != b.name
        with pytest.raises(UsageError):
            Pool(template="base", size=0, name=a.name)  # taken
    with Pool("base", size=1, name="mine") as c:
        assert c.name == "mine"


def test_pool_bad_input(state_dir: str) -> None:
    with pytest.raises(NotFound):
        Pool(template="no-such-template", size=1)
    with pytest.raises(UsageError):
        Pool(template="base", size=1, hidepid=3)
    with pytest.raises(UsageError):
        Pool(template="base", size=-1)


def test_pool_async(state_dir: str) -> None:
    async def main() -> None:
        pool = await Pool.create.aio("base", size=2, hidepid=2, audit=True)
        try:
            envs = await asyncio.gather(pool.acquire.aio(), pool.acquire.aio(), pool.acquire.aio())
            assert len({e.id for e in envs}) == 3  # the third is made on demand
            results = await asyncio.gather(*[e.run.aio("id -u", user="1001:1001") for e in envs])
            assert [r.stdout for r in results] == ["1001\n"] * 3
            for e in envs:
                await e.terminate.aio()
                await e.close.aio()
            info = await pool.resize.aio(0)
            assert info["size"] == 0
            assert (await pool.inspect.aio())["size"] == 0
            assert (await Pool.from_name.aio(pool.name)).name == pool.name
        finally:
            await pool.close.aio()
        async with await Pool.create.aio("base", size=1) as p2:
            env = await p2.acquire.aio()
            async with env:
                assert (await env.run.aio("echo ok")).stdout == "ok\n"

    asyncio.run(main())


def test_pool_without_size_keeps_one_warm(state_dir: str) -> None:
    with Pool(template="base", hidepid=2, audit=True) as pool:
        assert pool.size == 1 and pool.info["warm"] == 1
        with pool.acquire() as env:
            assert env.run("id -u", user="1001:1001").stdout == "1001\n"

    async def main() -> None:
        async with await Pool.create.aio("base") as pool:
            assert pool.size == 1 and pool.info["warm"] == 1

    asyncio.run(main())
