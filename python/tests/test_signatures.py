"""What help(), inspect and editors see of the SDK: real signatures on both forms of every call.

These need no worker: reading a method or a signature does no I/O.
"""

from __future__ import annotations

import inspect
import io
import pydoc
from typing import Any, Callable, List

import pytest

import sandweave
from sandweave import CreateOptions, Pool, Process, RunStream, Sandbox, Snapshot

pytestmark = pytest.mark.unit


def blank(cls: type) -> Any:
    """An object of cls as the SDK would hand one out, without a worker behind it."""
    return cls.__new__(cls)


def names(fn: Callable[..., Any]) -> List[str]:
    return list(inspect.signature(fn).parameters)


def help_text(obj: Any) -> str:
    out = io.StringIO()
    pydoc.Helper(output=out).help(obj)
    return out.getvalue()


RUN = ["cmd", "entrypoint", "user", "cwd", "env", "timeout", "stdin", "on_stdout", "on_stderr"]
START = ["cmd", "entrypoint", "user", "cwd", "env", "timeout"]
OPTIONS = [
    "hidepid",
    "audit",
    "user",
    "labels",
    "snapshot",
    "ttl",
    "idle_timeout",
    "cpus",
    "memory",
    "network",
    "publish",
    "connection",
    "state_dir",
]


def test_instance_calls_have_their_signature_in_both_forms() -> None:
    env = blank(Sandbox)
    for fn in (env.run, env.run.aio):
        sig = inspect.signature(fn)
        assert list(sig.parameters) == RUN
        assert sig.parameters["cmd"].default is None
        assert sig.parameters["timeout"].kind is inspect.Parameter.KEYWORD_ONLY
        assert sig.return_annotation == "RunResult"
    assert inspect.iscoroutinefunction(env.run.aio)
    assert not inspect.iscoroutinefunction(env.run)
    assert names(env.audit_log) == names(env.audit_log.aio) == ["path"]
    assert names(env.snapshot.aio) == ["state", "name"]
    assert inspect.signature(env.snapshot).parameters["state"].default == "auto"
    assert inspect.signature(blank(Pool).acquire.aio).return_annotation == "Sandbox"
    assert names(blank(Pool).resize) == ["size"]
    assert names(blank(RunStream).signal.aio) == ["sig"]
    for fn in (env.start, env.start.aio):
        assert names(fn) == START and inspect.signature(fn).return_annotation == "Process"
    proc = blank(Process)
    for fn in (proc.wait, proc.wait.aio, proc.output, proc.output.aio):
        assert names(fn) == [] and inspect.signature(fn).return_annotation == "RunResult"
    assert names(proc.kill) == names(proc.kill.aio) == ["signal"]
    assert inspect.signature(proc.kill).parameters["signal"].default == "TERM"
    assert inspect.signature(proc.is_running.aio).return_annotation == "bool"
    assert names(env.desktop.click.aio) == ["x", "y", "button"]
    # Read from the class, a call is a method: self first.
    assert names(Sandbox.run) == ["self"] + RUN


def test_class_calls_have_their_signature_in_both_forms() -> None:
    for fn in (Sandbox.create, Sandbox.create.aio):
        sig = inspect.signature(fn)
        assert list(sig.parameters) == ["template", "name"] + OPTIONS
        assert sig.return_annotation == "Sandbox"
    assert names(Sandbox) == ["template", "name"] + OPTIONS
    assert names(Sandbox.from_id.aio) == ["sandbox_id", "connection", "state_dir"]
    assert inspect.signature(Sandbox.list.aio).return_annotation == "List[Sandbox]"
    assert names(Snapshot.list) == ["connection", "state_dir"]
    for fn in (Pool, Pool.create, Pool.create.aio):
        assert names(fn) == ["template", "size", "name"] + OPTIONS
    assert names(Pool.from_name.aio) == ["name", "connection", "state_dir"]


def test_sandbox_and_pool_take_the_options_declared_once() -> None:
    assert list(CreateOptions.__annotations__) == OPTIONS
    pool = inspect.signature(Pool).parameters
    box = inspect.signature(Sandbox).parameters
    for key in OPTIONS:
        assert pool[key].kind is box[key].kind is inspect.Parameter.KEYWORD_ONLY
        assert pool[key].default is box[key].default is None
        assert pool[key].annotation == box[key].annotation


def test_pool_size_has_a_default() -> None:
    size = inspect.signature(Pool).parameters["size"]
    assert size.default == 1
    assert inspect.signature(Pool.create.aio).parameters["size"].default == 1


def test_a_wrong_keyword_is_a_type_error_before_any_io() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'sise'"):
        Sandbox(template="base", sise=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'hidepd'"):
        Pool(template="base", hidepd=2)
    with pytest.raises(TypeError, match="too many positional arguments"):
        Sandbox("base", 2)


def test_help_shows_parameters_and_docstrings() -> None:
    env = blank(Sandbox)
    for fn in (env.run, env.run.aio):
        text = help_text(fn)
        assert "run(cmd: " in text and "timeout: " in text and "on_stdout: " in text
        assert "Runs a command in the sandbox" in text
    assert "async run(" in help_text(env.run.aio)
    text = help_text(env.audit_log.aio)
    assert "audit_log(path: " in text and "Exports the audit log" in text
    text = help_text(Sandbox.create.aio)
    assert "hidepid: " in text and "audit: " in text and "-> 'Sandbox'" in text
    assert "Creates and starts a sandbox" in text
    text = help_text(Sandbox)
    assert "Sandbox(template: " in text and "hidepid: " in text
    assert "run(self, cmd: " in text and "audit_log(self, path: " in text
    text = help_text(Pool)
    assert "Pool(template: " in text and "size: 'int' = 1" in text and "acquire(self)" in text


def test_every_public_name_is_there() -> None:
    for name in sandweave.__all__:
        assert getattr(sandweave, name) is not None
    import sandweave.sandbox as old_home  # where these four were defined before

    for name in ("Sandbox", "RunResult", "RunStream", "Snapshot"):
        assert getattr(old_home, name) is getattr(sandweave, name)
