"""The export's header carries the search's margin, its provenance shows once on a terminal, and it
checks with the flag table the search's trials were checked against (no SGLang import)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli.export import main as export_main
from autotune.export.launch_command import TAG_FLAG_TABLE, TAG_WINNER_MARGIN
from autotune.sglang import flags, saved_flags
from autotune.tracking.tracker import Tracker
from tests.tracking_helpers import eagle, result

ROOT = Path(__file__).resolve().parents[3]
LINE = ("margin over the runner-up (num_steps=3 eagle_topk=4): +2.4% [-2.6%, +7.7%] at 95%, NOT separated: "
        "within the noise (from the finalists' 2 and 2 readings)")


def _search(store: Path, name: str, tags: dict[str, str]) -> Tracker:
    tr = Tracker(name, root=store).connect()
    tr.start_search(backend="sim")
    for trial_id, res in (("base", result({}, 1000.0)), ("t_best", result(eagle(5, 1), 1650.0)),
                          ("t_ok", result(eagle(3, 4), 1600.0))):
        tr.log_trial(trial_id, res)
    tr.log_to_search(tags=tags)
    return tr


def test_the_header_says_how_sure_the_search_is(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tr = _search(store, "sure", {TAG_WINNER_MARGIN: LINE})
    assert export_main(["--root", str(store), "--name", "sure", "--format", "sh"]) == 0
    text = capsys.readouterr().out
    assert f"# how sure: {LINE}\n" in text
    assert export_main(["--root", str(store), "--name", "sure", "--json"]) == 0
    assert f"how sure: {LINE}" in json.loads(capsys.readouterr().out)["autotune"]["notes"]
    # A run picked by --run-id is not the search's winner: the search's margin is not about it.
    other = next(r for r in tr.trial_runs() if r.trial_id == "t_ok")
    assert export_main(["--root", str(store), "--name", "sure", "--run-id", other.run_id]) == 0
    assert "how sure" not in capsys.readouterr().out


def test_without_a_margin_there_is_no_line(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _search(store, "unsure", {})
    assert export_main(["--root", str(store), "--name", "unsure"]) == 0
    out = capsys.readouterr()
    assert "how sure" not in out.out + out.err and "# from trial t_best" in out.out


@pytest.mark.slow  # 4 s: a pseudo-terminal subprocess (make test-fast leaves it out)
def test_provenance_is_printed_once_on_a_terminal(store: Path) -> None:
    _search(store, "tty", {})
    main_fd, sub_fd = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "autotune.export", "--name", "tty"], cwd=store,
                            stdout=sub_fd, stderr=sub_fd, env={**os.environ, "PYTHONPATH": str(ROOT)})
    os.close(sub_fd)
    chunks = []
    while True:
        try:
            data = os.read(main_fd, 65536)
        except OSError:  # the terminal closes when the command ends
            break
        if not data:
            break
        chunks.append(data)
    os.close(main_fd)
    assert proc.wait(timeout=120) == 0
    seen = b"".join(chunks).decode()
    assert seen.count("autotune export of search 'tty'") == 1, seen
    assert "python -m sglang.launch_server" in seen


needs_sglang = pytest.mark.skipif(saved_flags.installed_version() is None, reason="SGLang is not installed")


@needs_sglang
@pytest.mark.slow  # two exports in subprocesses, one importing SGLang: 13 s here
def test_the_export_checks_with_the_searchs_flag_table_without_importing_sglang(
        store: Path, tmp_path: Path) -> None:
    table = tmp_path / "sglang-flags.json"
    flags.write_flag_table(flags.installed_flags(), table)
    _search(store, "tabled", {TAG_FLAG_TABLE: str(table)})
    env = {k: v for k, v in os.environ.items() if k != flags.FLAG_TABLE_ENV}
    probe = ("import sys; from autotune.cli.export import main; "
             f"code = main(['--root', {str(store)!r}, '--name', sys.argv[1], '-o', sys.argv[2]]); "
             "print(code, 'sglang.srt.server_args' in sys.modules)")
    ran = subprocess.run([sys.executable, "-c", probe, "tabled", str(tmp_path / "a.sh")], env={
        **env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120, check=False)
    assert ran.stdout.split() == ["0", "False"], ran.stderr[-2000:]
    # A search whose table is gone is checked by the installed SGLang itself, to the same script.
    _search(store, "untabled", {TAG_FLAG_TABLE: str(tmp_path / "gone.json")})
    again = subprocess.run([sys.executable, "-c", probe, "untabled", str(tmp_path / "b.sh")], env={
        **env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120, check=False)
    assert again.stdout.split() == ["0", "True"], again.stderr[-2000:]
    command = [ln for ln in (tmp_path / "a.sh").read_text().splitlines() if not ln.startswith("#")]
    assert command == [ln for ln in (tmp_path / "b.sh").read_text().splitlines() if not ln.startswith("#")]


@needs_sglang
def test_a_table_of_another_sglang_version_is_not_used(tmp_path: Path) -> None:
    table = tmp_path / "t.json"
    flags.write_flag_table(flags.installed_flags(), table)
    assert saved_flags.installed_table(table) is not None
    data = json.loads(table.read_text())
    data["sglang_version"] = "0.0.1"
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    assert saved_flags.installed_table(old) is None
    assert saved_flags.installed_table(tmp_path / "missing.json") is None and saved_flags.installed_table(None) is None
