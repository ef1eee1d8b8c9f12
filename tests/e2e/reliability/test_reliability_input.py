"""Bad input to ``python -m autotune.search``, run as a real subprocess.

Each case must end with exit code 2 and exactly one ``error:`` line on stderr that says what is
wrong (for a space file: its path and line), with no traceback, and before any server starts (no
server log directory, no search header on stdout, no process left carrying the test's token).
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.e2e.reliability import record
from tests.e2e.reliability.procs import new_token, processes_with_token
from tests.e2e.reliability.searchrun import run_cli, start_cli
from tests.e2e.reliability.spaces import base_space, merged

# slow: every case is a CLI subprocess, and 60 generated space files
pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

TP = {"tp_size": {"type": "categorical", "choices": [1, 2]}}


def _closed_port() -> int:
    """A port nothing listens on (bound, read, released: free unless someone races for it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Case:
    """One bad input: how to write the space, extra CLI args, words the error must contain."""

    name: str
    space: Callable[[Path, str], str | dict[str, Any]]
    words: tuple[str, ...]
    args: tuple[str, ...] = ()
    space_error: bool = True  # the message names the space file and a line
    creates_nothing: bool = False  # the error is the only line, and no file or folder was made
    extra: dict[str, Any] = field(default_factory=dict)


def _good(tmp: Path, token: str) -> dict[str, Any]:
    return merged(base_space("bad-input", token=token), parameters=TP)


def _sglang(tmp: Path, token: str, *, model: str) -> dict[str, Any]:
    space = merged(_good(tmp, token), backend="sglang", model_path=model,
                   draft_model_path=str(tmp))
    space.pop("profile")
    return space


CASES = [
    Case("malformed YAML", lambda tmp, tok: yaml.safe_dump(_good(tmp, tok), sort_keys=False)
         + "extra: {unclosed: [1, 2}\n", ("malformed YAML",)),
    Case("unknown parameter name", lambda tmp, tok: merged(_good(tmp, tok), parameters={
        **TP, "speculative_num_stepz": {"type": "int", "low": 1, "high": 3}}),
         ("speculative_num_stepz", "speculative_num_steps")),
    Case("unknown top-level key", lambda tmp, tok: {**_good(tmp, tok), "budgett": {"trials": 3}},
         ("budgett", "budget")),
    Case("empty choices", lambda tmp, tok: merged(_good(tmp, tok), parameters={
        "tp_size": {"type": "categorical", "choices": []}}), ("tp_size", "choices")),
    Case("inverted range", lambda tmp, tok: merged(_good(tmp, tok), parameters={
        **TP, "NCCL_MIN_NCHANNELS": {"type": "int", "low": 8, "high": 2}}), ("low", "high")),
    Case("value SGLang's parser rejects", lambda tmp, tok: merged(_good(tmp, tok), parameters={
        **TP, "attention_backend": {"type": "categorical", "choices": ["fa3", "flashinferr"]}}),
         ("flashinferr", "attention_backend")),
    Case("flag SGLang 0.5.23 no longer has", lambda tmp, tok: merged(
        _good(tmp, tok), fixed_args={**_good(tmp, tok)["fixed_args"], "cuda_graph_max_bs": 8}),
         ("cuda_graph_max_bs",)),
    Case("forbidden flag", lambda tmp, tok: merged(
        _good(tmp, tok), fixed_args={**_good(tmp, tok)["fixed_args"], "enable_symm_mem": True},
        forbidden={"args": ["enable_symm_mem"]}), ("enable_symm_mem", "forbidden")),
    Case("flag that sets a forbidden env value", lambda tmp, tok: merged(
        _good(tmp, tok), parameters={**TP, "enable_nccl_nvls": {"type": "categorical",
                                                                "choices": [False, True]}},
        forbidden={"env": {"NCCL_NVLS_ENABLE": ["1"]}}), ("enable_nccl_nvls", "NCCL_NVLS_ENABLE")),
    Case("unknown sim profile", lambda tmp, tok: merged(_good(tmp, tok), profile="no-such-profile"),
         ("no-such-profile",)),
    Case("sglang backend, model path missing", lambda tmp, tok: _sglang(
        tmp, tok, model=str(tmp / "no-such-model")), ("model_path", "does not exist")),
    # A tracking server that does not answer is no bad input (the search spools its writes:
    # tests/e2e/reliability/test_reliability_tracking.py); an address no server could have is.
    Case("malformed tracking URI", _good, ("tracking", "malformed"),
         args=("--tracking-uri", "http://127.0.0.1:notaport"), space_error=False),
    Case("tracking URI scheme MLflow has no store for", _good, ("tracking", "cannot use"),
         args=("--tracking-uri", "foo://127.0.0.1:{port}"), space_error=False),
    # Issue 36: a bad address is refused before the MLflow store (default or --tracking-uri) and
    # the search's folders are made, and it is the only line printed.
    Case("bad Ray address", _good, ("Ray cluster", "nothing answers", "host:6379"),
         args=("--address", "127.0.0.1:{port}"), space_error=False, creates_nothing=True),
    Case("malformed Ray address", _good, ("not a Ray address", "'notaport' is not a port", "ray://host:10001"),
         args=("--address", "nohost:notaport"), space_error=False, creates_nothing=True),
    Case("bad Ray address with --tracking-uri", _good, ("Ray cluster", "nothing answers"),
         args=("--address", "127.0.0.1:{port}", "--tracking-uri", "sqlite:///{tmp}/store.db"),
         space_error=False, creates_nothing=True),
    Case("--trials 0", _good, ("--trials",), args=("--trials", "0"), space_error=False),
    Case("sglang backend on a node without GPUs", lambda tmp, tok: _sglang(tmp, tok, model=str(tmp)),
         ("tp_size 2", "GPU"), space_error=False),
    # Issue 36: names used as paths, absurd values, alias bombs, a folder that cannot be written.
    Case("--name that leaves mlruns/", _good, ("--name", "plain folder name", "escaped-by-name"),
         args=("--name", "../../escaped-by-name"), space_error=False),
    Case("budget.trials of 10**23", lambda tmp, tok: merged(_good(tmp, tok), budget={"trials": 10**23}),
         ("budget.trials", "wall_time_s")),
    Case("YAML alias bomb in fixed_env", lambda tmp, tok: _alias_bomb(_good(tmp, tok)), ("aliases expand",)),
    Case("mlruns/ not writable (a file there)", lambda tmp, tok: _mlruns_file(tmp, _good(tmp, tok)),
         ("cannot write", "mlruns"), space_error=False),
]


def _alias_bomb(space: dict[str, Any]) -> str:
    """``space`` as YAML with 9**8 copies of one string behind nine nested aliases (a 0.5 KB file)."""
    lines = ["a0: &a0 'xxxxxxxxxx'"] + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    text = yaml.safe_dump(space, sort_keys=False)
    return "\n".join(lines) + "\n" + text.replace("fixed_env:\n", "fixed_env:\n  BOMB: *a8\n", 1)


def _mlruns_file(tmp: Path, space: dict[str, Any]) -> dict[str, Any]:
    (tmp / "mlruns").write_text("not a folder\n")
    return space


def _run_case(case: Case, tmp_root: Path) -> dict[str, Any]:
    tmp = tmp_root / case.name.replace(" ", "_").replace("'", "").replace("/", "")
    tmp.mkdir(parents=True)
    token = new_token("input")
    content = case.space(tmp, token)
    path = tmp / "space.yaml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
    port = _closed_port()
    args = [a.replace("{port}", str(port)).replace("{tmp}", str(tmp)) for a in case.args]
    before = sorted(p.name for p in tmp.iterdir())
    proc = run_cli(path, *args, root=tmp, token=token, timeout_s=120)
    made = sorted(set(p.name for p in tmp.iterdir()) - set(before))
    # "error: ..." from the commands, "PROG: error: ..." from a flag refused while parsing.
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:") or ": error: " in ln]
    message = errors[0] if errors else ""
    started_servers = any((tmp / "mlruns" / "ray").rglob("logs")) if (tmp / "mlruns").exists() else False
    checks = {
        "exit code 2": proc.returncode == 2,
        "one error line": len(errors) == 1,
        "no traceback": "Traceback" not in proc.stderr + proc.stdout,
        "says what is wrong": all(w.lower() in message.lower() for w in case.words),
        "message of a few lines": len(proc.stderr) < 2000,
        "names file and line": (not case.space_error) or f"{path}:" in message,
        # No server, no Ray session, no process left (the search's first line may be printed:
        # some inputs are refused only when the search looks at its cluster).
        "nothing started": not started_servers and not processes_with_token(token),
    }
    if case.creates_nothing:
        checks["the error is the only line"] = [ln for ln in (proc.stdout + proc.stderr).splitlines()
                                                if ln.strip()] == [message]
        checks["no file or folder made"] = not made
    # The space's temporary path says nothing in the report; its name and line do.
    return {"case": case.name, "checks": checks, "message": message.replace(str(path), "space.yaml")
            .replace(str(tmp), "<tmp>"), "exit_code": proc.returncode,
            "stderr_tail": proc.stderr[-1500:], "made": made}


def test_bad_inputs_fail_fast_with_one_clear_error(tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=3) as pool:
        outcomes = list(pool.map(lambda c: _run_case(c, tmp_path), CASES))
    for o in outcomes:
        record.record("bad_inputs", o["case"], ok=all(o["checks"].values()), exit_code=o["exit_code"],
                      message=o["message"], failed_checks=[k for k, v in o["checks"].items() if not v])
    bad = [o for o in outcomes if not all(o["checks"].values())]
    assert not bad, "\n\n".join(f"{o['case']}: {[k for k, v in o['checks'].items() if not v]} made {o['made']}\n"
                                f"{o['stderr_tail']}" for o in bad)


# tests/unit/space/test_space_fuzz.py fuzzes SearchSpace.from_dict and YAML text already in memory. What it
# does not reach is the file itself: bytes that are not UTF-8, truncated or bit-flipped files,
# relative profile and prompt paths, and check_paths() of the sglang backend. Same property here:
# only ConfigError comes out.
_SIM = merged(base_space("fuzz", token="t"), parameters=TP)
_SGLANG = {k: v for k, v in merged(_SIM, backend="sglang").items() if k != "profile"}
_BASES = [yaml.safe_dump(space, sort_keys=False).encode() for space in (_SIM, _SGLANG)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_space_files_on_disk_only_raise_config_error(tmp_path: Path, data: st.DataObject) -> None:
    from autotune.errors import ConfigError
    from autotune.space.search_space import load_space

    raw = bytearray(data.draw(st.sampled_from(_BASES)))
    for _ in range(data.draw(st.integers(0, 3))):
        action = data.draw(st.sampled_from(["flip", "cut", "insert", "paths"]))
        at = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if action == "flip" and raw:
            raw[at] = data.draw(st.sampled_from(b" :-[]{},#&*!|>'\"\nabc019.") | st.integers(0, 255))
        elif action == "cut":
            del raw[at:at + data.draw(st.integers(1, 40))]
        elif action == "insert":
            raw[at:at] = data.draw(st.binary(max_size=12))
        else:
            raw = bytearray(raw.replace(b"sim/Llama-3.1-8B\n", data.draw(st.sampled_from(
                [b"./missing\n", b"~/x\n", b"../..\n", b"/\n", b"\"\"\n", b"./\xff\n"]))))
    path = tmp_path / "space.yaml"
    path.write_bytes(bytes(raw))
    try:
        space = load_space(str(path))
        if space.backend == "sglang":
            space.check_paths()
        event(f"loaded ({space.backend})")
    except ConfigError as exc:
        assert exc.message
        event(f"ConfigError at {(exc.field or '-').split('.')[0]}")


def test_a_read_only_mlruns_is_refused_before_anything_starts(tmp_path: Path) -> None:
    mlruns = tmp_path / "mlruns"
    mlruns.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mlruns)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here ({mounted.stderr.strip()}); the case "
                    "'mlruns/ not writable (a file there)' takes the same path")
    try:
        token = new_token("read-only")
        path = tmp_path / "space.yaml"
        path.write_text(yaml.safe_dump(_good(tmp_path, token), sort_keys=False))
        proc = run_cli(path, root=tmp_path, token=token, timeout_s=120)
    finally:
        subprocess.run(["umount", str(mlruns)], check=False)
    # "error: ..." from the commands, "PROG: error: ..." from a flag refused while parsing.
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:") or ": error: " in ln]
    ok = (proc.returncode == 2 and len(errors) == 1 and "Read-only file system" in errors[0]
          and "Traceback" not in proc.stderr and not processes_with_token(token))
    record.record("bad_inputs", "mlruns/ on a read-only file system", ok=ok, exit_code=proc.returncode,
                  message=errors[0].replace(str(tmp_path), "<tmp>") if errors else proc.stderr[-300:])
    assert ok, proc.stderr[-3000:]


def test_two_searches_of_one_name_started_together(tmp_path: Path) -> None:
    token = new_token("same-name")
    space = merged(base_space("same", token=token), budget={"trials": 1})
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    procs = [start_cli(path, "--name", "same", root=tmp_path, token=token, log=log)
             for log in logs]
    codes = [p.wait(timeout=600) for p in procs]
    texts = [log.read_text(errors="replace") for log in logs]
    refused = [i for i, t in enumerate(texts) if "a search named 'same' is running (pid" in t]
    store_errors = [w for t in texts for w in ("alembic", "migration", "already exists", "Traceback") if w in t]
    # Either the second found the first running and was refused, or (a loaded box) the first had
    # ended by then and the second ran after it: both are right; a store error never is.
    ok = not store_errors and (sorted(codes) == [0, 2] and len(refused) == 1 and
                               f"(pid {procs[1 - refused[0]].pid})" in texts[refused[0]]
                               or codes == [0, 0])
    record.record("bad_inputs", "two searches of one name started together in a fresh folder", ok=ok,
                  exit_codes=codes, refused=len(refused), store_errors=store_errors)
    assert ok, "\n----\n".join(t[-2000:] for t in texts)
