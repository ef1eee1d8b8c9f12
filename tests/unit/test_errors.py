"""autotune.errors: values cut for messages, and a full disk found however deep it was wrapped."""

from __future__ import annotations

import errno
import sqlite3

import pytest
import sqlalchemy.exc

from autotune.errors import SHOWN_CHARS, cut, is_disk_full


def test_cut_keeps_short_text_and_cuts_long_text_saying_how_much() -> None:
    assert cut("short") == "short"
    long = "x" * 4_300_000  # what a YAML alias bomb expands to
    shown = cut(long)
    assert len(shown) <= SHOWN_CHARS and shown.endswith(f"({4_300_000 - SHOWN_CHARS} more characters)")
    assert len(cut(long, limit=50)) <= 50
    with pytest.raises(ValueError, match="limit"):
        cut(long, limit=5)


def _wrapped(inner: BaseException) -> BaseException:
    """``inner`` as MLflow hands it over: its own exception raised from SQLAlchemy's."""
    try:
        try:
            raise sqlalchemy.exc.OperationalError("INSERT INTO metrics ...", {}, inner)
        except sqlalchemy.exc.OperationalError as exc:
            raise RuntimeError("(sqlite3.OperationalError) " + "y" * 500) from exc
    except RuntimeError as exc:
        return exc


def test_a_full_disk_is_found_through_the_chain() -> None:
    assert is_disk_full(_wrapped(sqlite3.OperationalError("database or disk is full")))
    assert is_disk_full(_wrapped(OSError(errno.ENOSPC, "No space left on device")))
    assert not is_disk_full(_wrapped(sqlite3.OperationalError("database is locked")))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
