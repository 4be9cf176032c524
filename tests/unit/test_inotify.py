"""The sidecar's own inotify binding (podmortem.sidecar.inotify): the kernel's events, read and parsed."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest

from podmortem.sidecar import inotify


def test_parse_events_reads_back_to_back_records_with_padded_names() -> None:
    def record(wd: int, mask: int, cookie: int, name: bytes) -> bytes:
        padded = name + b"\0" * (16 - len(name)) if name else b""
        return struct.pack("iIII", wd, mask, cookie, len(padded)) + padded

    data = record(1, inotify.CREATE, 0, b"error.json") + record(2, inotify.IGNORED, 0, b"") + record(1, 0x80, 7, b"x")
    assert inotify.parse_events(data) == [
        inotify.Event(1, inotify.CREATE, 0, "error.json"),
        inotify.Event(2, inotify.IGNORED, 0, ""),
        inotify.Event(1, inotify.MOVED_TO, 7, "x"),
    ]


def test_a_watched_directory_reports_a_written_file_and_its_own_removal(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    directory.mkdir()
    notify = inotify.INotify()
    try:
        assert notify.read() == []  # nothing yet, and the descriptor does not block
        wd = notify.add_watch(directory, inotify.CLOSE_WRITE | inotify.DELETE_SELF)
        assert notify.add_watch(directory, inotify.CLOSE_WRITE | inotify.DELETE_SELF) == wd
        (directory / "error.json").write_text("{}")
        events = notify.read()
        assert [(e.wd, e.name) for e in events if e.mask & inotify.CLOSE_WRITE] == [(wd, "error.json")]
        (directory / "error.json").unlink()
        directory.rmdir()
        masks = [e.mask for e in notify.read() if e.wd == wd]
        assert any(m & inotify.DELETE_SELF for m in masks) and any(m & inotify.IGNORED for m in masks)
    finally:
        fd = notify.fileno()
        notify.close()
    with pytest.raises(OSError):
        os.fstat(fd)  # closed


def test_watching_a_missing_directory_raises_enoent(tmp_path: Path) -> None:
    notify = inotify.INotify()
    try:
        with pytest.raises(OSError) as raised:
            notify.add_watch(tmp_path / "missing", inotify.CREATE)
        assert raised.value.errno == errno.ENOENT
        with pytest.raises(OSError) as raised:
            notify.rm_watch(12345)
        assert raised.value.errno == errno.EINVAL
    finally:
        notify.close()
