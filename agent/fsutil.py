"""Small file-system helpers of the agent: find a file by inode, find the last line end.

Rotation tools rename files within their directory, so a file the agent knows by
device and inode is looked up there with one ``scandir`` when its name changed while
nobody was watching.
"""

from __future__ import annotations

import os

from agent.identity import FileKey


def inodes_in(directory: str) -> dict[tuple[int, int], str]:
    """(dev, ino) -> path for the regular files of one directory (one scandir)."""
    found: dict[tuple[int, int], str] = {}
    try:
        with os.scandir(directory) as entries:
            for item in entries:
                try:
                    if item.is_file(follow_symlinks=False):
                        st = item.stat(follow_symlinks=False)
                        found[(st.st_dev, st.st_ino)] = item.path
                except OSError:
                    continue
    except OSError:
        pass
    return found


def find_inode(directory: str, key: FileKey) -> str | None:
    """The path of the file with identity ``key`` in ``directory``, if any."""
    return inodes_in(directory).get((key.dev, key.ino))


def last_line_end(path: str, size: int) -> int:
    """Offset just after the last newline before ``size`` (where "start at end" starts)."""
    if size == 0:
        return 0
    try:
        with open(path, "rb") as handle:
            position = size
            while position > 0:
                step = min(65536, position)
                handle.seek(position - step)
                block = handle.read(step)
                newline = block.rfind(b"\n")
                if newline != -1:
                    return position - step + newline + 1
                position -= step
    except OSError:
        return size
    return 0
