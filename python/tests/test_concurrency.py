"""Many requests on one serve child: from one event loop, and from several threads."""

from __future__ import annotations

import asyncio
import threading

from sandweave import Connection, Sandbox, connect


def test_many_sandboxes_from_one_event_loop(state_dir: str) -> None:
    # 24 sandboxes created, used and closed concurrently, 10 commands each in
    # flight at once: 240 runs on one connection, no thread per call.
    async def episode(i: int) -> int:
        env = await Sandbox.create.aio("base", labels={"i": str(i)})
        try:
            results = await asyncio.gather(*[env.run.aio(f"echo {i}-{k}") for k in range(10)])
            assert [r.stdout for r in results] == [f"{i}-{k}\n" for k in range(10)]
            return len(results)
        finally:
            await env.close.aio()

    async def main() -> None:
        before = threading.active_count()
        done = await asyncio.gather(*[episode(i) for i in range(24)])
        assert sum(done) == 240
        assert threading.active_count() <= before + 4  # the child's threads, at most

    asyncio.run(main())


def test_more_requests_than_the_server_takes_at_once(state_dir: str) -> None:
    # The server takes 256 requests in flight; the SDK holds the rest back.
    # Shown with a connection limited to 3, and with 300 real requests.
    conn = connect()
    small = Connection(conn.host, state_dir=conn.state_dir, binary=conn.binary, max_in_flight=3)
    try:

        async def main() -> None:
            env = await Sandbox.create.aio("base", connection=small)
            try:
                results = await asyncio.gather(*[env.run.aio(f"echo {k}") for k in range(20)])
                assert [r.stdout for r in results] == [f"{k}\n" for k in range(20)]
            finally:
                await env.close.aio()
            infos = await asyncio.gather(*[conn.call_async("version") for _ in range(300)])
            assert all(i["protocol"] == 1 for i in infos)

        asyncio.run(main())
    finally:
        small.close()


def test_sync_calls_from_several_threads(state_dir: str) -> None:
    with Sandbox(template="base") as a, Sandbox(template="base") as b:
        errors: list = []

        def worker(n: int) -> None:
            try:
                env = a if n % 2 else b
                for k in range(6):
                    r = env.run(["echo", f"{n}.{k}"])
                    assert r.stdout == f"{n}.{k}\n", r
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert a.connection.pid == b.connection.pid


def test_requests_larger_than_the_pipe_from_several_threads(state_dir: str) -> None:
    # Each request is ~400 KB of JSON, several times the pipe's 64 KiB: a
    # caller's write is partial and the writer thread sends the rest, while
    # other threads' requests wait behind it. Lines never interleave: every
    # request gets its own answer (the server refuses the name), none hangs.
    from sandweave.errors import SandweaveError

    conn = connect()
    errors: list = []
    answered: list = []

    def worker(n: int) -> None:
        try:
            for k in range(4):
                name = f"{n}{k}" + "x" * 400_000
                try:
                    conn.call("sandbox.inspect", {"id": name})
                    errors.append(f"{n}/{k}: inspect of a 400 KB name succeeded")
                except SandweaveError as e:
                    answered.append((n, k, type(e).__name__))
            conn.call("version")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"{n}: {e!r}")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a request larger than the pipe hung"
    assert errors == []
    assert len(answered) == 24
    assert conn.call("version")["protocol"] == 1  # the connection is still usable
