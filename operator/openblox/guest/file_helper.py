"""File operations inside the sandbox: `python3 -c <this file> OPERATION PATH [ARG]`.

Standard library only; paths arrive as argv and data on stdin, never through a shell.
Errors are one line on stderr with the reason (the client adds the path), exit status 1.
"""

import json
import os
import shutil
import stat
import sys

CHUNK = 1 << 20


def write(path: str, mode: str) -> None:
    with open(path, "wb") as handle:
        while True:
            data = sys.stdin.buffer.read(CHUNK)
            if not data:
                break
            handle.write(data)
    os.chmod(path, int(mode, 8))


def read(path: str) -> None:
    with open(path, "rb") as handle:
        while True:
            data = handle.read(CHUNK)
            if not data:
                break
            sys.stdout.buffer.write(data)


def listing(path: str) -> None:
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        info = entry.stat(follow_symlinks=False)
        kind = (
            "dir"
            if stat.S_ISDIR(info.st_mode)
            else "link"
            if stat.S_ISLNK(info.st_mode)
            else "file"
        )
        record = {
            "name": entry.name,
            "type": kind,
            "size": info.st_size,
            "mode": oct(stat.S_IMODE(info.st_mode)),
        }
        sys.stdout.write(json.dumps(record) + "\n")


def remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def main() -> None:
    operation, path = sys.argv[1], sys.argv[2]
    try:
        if operation == "write":
            write(path, sys.argv[3])
        elif operation == "read":
            read(path)
        elif operation == "list":
            listing(path)
        elif operation == "remove":
            remove(path)
        else:
            raise SystemExit("unknown operation " + operation)
    except OSError as error:
        sys.stderr.write(f"{error.strerror or error}\n")
        sys.exit(1)


main()
