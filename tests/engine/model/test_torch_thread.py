"""engine.model.torch_thread: the first forward's thread is the one; another thread's CPU forward warns once."""

from __future__ import annotations

import logging
import threading

import pytest

from engine.model.torch_thread import ForwardThreads


def in_thread(fn: object) -> list[bool]:
    out: list[bool] = []
    t = threading.Thread(target=lambda: out.append(fn()))  # type: ignore[operator]
    t.start()
    t.join()
    return out


def test_a_second_thread_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    ft = ForwardThreads()
    caplog.set_level(logging.WARNING, logger="engine.model.torch_thread")
    assert ft.note("cpu", 2) is False and ft.note("cpu", 2) is False  # the first thread, again
    assert in_thread(lambda: ft.note("cpu", 2)) == [True]
    assert in_thread(lambda: ft.note("cpu", 2)) == [True]
    assert len([r for r in caplog.records if "second thread" in r.message]) == 1


def test_one_torch_thread_or_an_accelerator_is_not_a_second_team(caplog: pytest.LogCaptureFixture) -> None:
    ft = ForwardThreads()
    caplog.set_level(logging.WARNING, logger="engine.model.torch_thread")
    assert in_thread(lambda: ft.note("cpu", 2)) == [False]  # a worker thread may be the one
    assert ft.note("cpu", 1) is False and ft.note("cuda", 8) is False
    assert not caplog.records and ft.warned is False
    assert ft.note("cpu", 2) is True and ft.warned is True
