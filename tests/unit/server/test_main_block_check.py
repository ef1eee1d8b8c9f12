"""The main-block check's decisions (autotune_main_block.Check), asked directly: which import asks
for which group, what is compared, what is given back. The whole mechanism in a real launcher
process is in tests/integration/test_standby_main_block.py; here no hook is installed."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import pytest

from autotune.server._prefork import autotune_main_block as mb


class Relaunched(Exception):
    pass


def _check(plan: dict[str, Any], *, late: tuple[str, ...] = ()) -> tuple[mb.Check, list[str]]:
    said: list[str] = []

    def relaunch(why: str) -> NoReturn:
        raise Relaunched(why)

    return mb.Check(plan, late=late, relaunch=relaunch, say=said.append), said


def _plan(**start: str | None) -> dict[str, Any]:
    return {"pkg.config": {"modules": ["pkg.config", "pkg.deep"], "start": dict(start), "prefixes": [],
                           "writes": {"MB_WRITTEN": "by-import"}},
            "pkg.server": {"modules": ["pkg.server"], "start": {}, "prefixes": [], "writes": {}}}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MB_READ", "MB_WRITTEN", "MB_LATE", "MB_X_ONE"):
        monkeypatch.delenv(name, raising=False)


def test_relative_and_absolute_names() -> None:
    assert mb._absolute("config", {"__package__": "pkg.sub"}, 1) == "pkg.sub.config"
    assert mb._absolute("config", {"__package__": "pkg.sub"}, 2) == "pkg.config"
    assert mb._absolute("", {"__package__": "pkg.sub"}, 1) == "pkg.sub"
    assert mb._absolute("pkg.config", None, 0) == "pkg.config"


def test_a_module_of_a_group_asked_for_checks_the_group_and_gives_its_writes_back() -> None:
    check, said = _check(_plan(MB_READ=None, MB_WRITTEN=None))
    check.asked("other.module", ())  # not imported ahead: nothing happens
    assert set(check.groups) == {"pkg.config", "pkg.server"} and "MB_WRITTEN" not in os.environ
    # `from pkg import deep` asks for pkg and pkg.deep: deep is config's group.
    check.asked("pkg", ("deep",))
    assert set(check.groups) == {"pkg.server"} and os.environ["MB_WRITTEN"] == "by-import"
    assert not said
    check.asked("pkg.server", ())
    assert not check.groups and said == [f"{mb.TAG}{mb.CHECKED}3 modules, 2 variables"]


def test_a_variable_set_since_makes_it_a_fresh_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    check, _ = _check(_plan(MB_READ=None))
    monkeypatch.setenv("MB_READ", "set-by-main")
    with pytest.raises(Relaunched, match="the imports of pkg.config read or wrote MB_READ, None when imported "
                                         "ahead, 'set-by-main' where the launcher imports pkg.config"):
        check.asked("pkg.config", ())
    assert "MB_WRITTEN" not in os.environ  # nothing given back to a launcher that starts over


def test_late_variables_are_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    check, _ = _check(_plan(MB_LATE="old"), late=("MB_L*",))
    monkeypatch.setenv("MB_LATE", "new")
    check.asked("pkg.config", ())
    assert check.groups.keys() == {"pkg.server"}


def test_a_group_that_iterated_the_environment_compares_its_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = {"pkg.config": {"modules": ["pkg.config"], "start": {}, "prefixes": ["MB_X_"], "writes": {}}}
    check, _ = _check(plan)
    monkeypatch.setenv("MB_X_ONE", "1")  # a new variable under the prefix it read whole
    with pytest.raises(Relaunched, match="MB_X_ONE, None when imported ahead, '1'"):
        check.asked("pkg.config", ())
    # All of it (a module that iterated it and no prefixes named): the whole environment as it was.
    monkeypatch.delenv("MB_X_ONE")
    check, _ = _check({"pkg.config": {**plan["pkg.config"], "prefixes": [mb.ALL], "start": dict(os.environ)}})
    monkeypatch.setenv("MB_X_ONE", "1")
    with pytest.raises(Relaunched, match="MB_X_ONE, None when imported ahead"):
        check.asked("pkg.config", ())


def test_import_ahead_records_reads_and_writes_in_the_launchers_order(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "mbpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "first.py").write_text("import os\nos.environ['MB_WRITTEN'] = 'by-first'\n"
                                  "READ = os.environ.get('MB_READ')\n")
    (pkg / "second.py").write_text("import os\nSEEN = os.environ.get('MB_WRITTEN')\nLATE = 'MB_LATE' in os.environ\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    failed: list[str] = []
    plan = mb.import_ahead(["mbpkg.first", "mbpkg.second", "mbpkg.missing"], scans={}, failed=failed)
    try:
        assert plan["mbpkg.first"]["modules"] == ["mbpkg", "mbpkg.first"]
        assert plan["mbpkg.first"]["start"] == {"MB_READ": None, "MB_WRITTEN": None}
        assert plan["mbpkg.first"]["writes"] == {"MB_WRITTEN": "by-first"}
        # second was imported after first's write, as the launcher would import it; all written is
        # taken back at the end.
        import mbpkg.second  # type: ignore[import-not-found]

        assert mbpkg.second.SEEN == "by-first" and "MB_WRITTEN" not in os.environ
        assert plan["mbpkg.second"]["start"] == {"MB_LATE": None, "MB_WRITTEN": "by-first"}
        assert plan["mbpkg.missing"]["modules"] == [] and failed == [
            "mbpkg.missing: ModuleNotFoundError: No module named 'mbpkg.missing'"]
    finally:
        for name in [m for m in list(sys.modules) if m.startswith("mbpkg")]:
            del sys.modules[name]
