"""Sandbox(network=...): the egress policy reaches the worker, the sandbox gets its own network, and a bad entry is refused."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from sandweave import Sandbox, UsageError


def test_network_policy_and_none(state_dir: str) -> None:
    allow = ["10.213.0.0/16:18080/tcp"]
    with Sandbox(template="base", network={"allow": allow, "deny": ["10.213.0.0/16:18081"]}) as env:
        net = env.spec["runtime_options"]["network"]
        assert net == {"allow": allow, "deny": ["10.213.0.0/16:18081"]}
        assert env.spec["origin"]["/runtime_options/network"] == "flag"
        link = env.info["network"]
        assert link["host_address"].startswith("10.213.") and link["guest_address"].startswith("10.213.")
        # The guest sees its address on eth0 and a default route to the host end.
        r = env.run("ip -4 addr show eth0; ip route", user="0:0")
        assert link["guest_address"] in r.stdout and f"default via {link['host_address']}" in r.stdout
    with Sandbox(template="base", network="none") as env:
        assert env.spec["runtime_options"]["network"] == "none"
        assert "network" not in env.info


def test_network_bad_entry_is_refused(state_dir: str) -> None:
    with pytest.raises(UsageError, match=r"allow '10.0.0.1/8': host bits set"):
        Sandbox(template="base", network={"allow": ["10.0.0.1/8"]})
    with pytest.raises(ValueError, match="unknown key"):
        Sandbox(template="base", network={"alow": []})


def test_publish_exposes_a_guest_port_on_loopback(state_dir: str) -> None:
    with socket.socket() as probe:  # a port free here a moment ago
        probe.bind(("127.0.0.1", 0))
        host_port = probe.getsockname()[1]
    with Sandbox(template="base", publish=[f"{host_port}:8000"]) as env:
        assert env.spec["publish"] == [f"{host_port}:8000"]
        # Nothing out: the policy a publish-only sandbox gets is empty.
        assert env.spec["runtime_options"]["network"] == {"allow": [], "deny": []}
        server = threading.Thread(target=env.run, args=("nc -l -p 8000 -e echo from-the-guest",))
        server.start()
        got = b""
        for _ in range(100):  # until the guest's server listens
            with socket.create_connection(("127.0.0.1", host_port), timeout=5) as s:
                got = s.recv(100)
            if got:
                break
            time.sleep(0.1)
        server.join(30)
        assert got == b"from-the-guest\n"
    # Gone with the sandbox.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", host_port), timeout=2).close()
    with pytest.raises(TypeError, match="publish"):
        Sandbox(template="base", publish="8000")
