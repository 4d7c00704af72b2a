"""Sandbox(network=...): the egress policy reaches the worker, the sandbox gets its own network, and a bad entry is refused."""

from __future__ import annotations

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
