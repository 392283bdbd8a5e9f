"""The preview relay's agent, run inside the sandbox: `python3 -I -S -c <this file> PORT`.

It connects to 127.0.0.1:PORT and copies bytes both ways: its stdin (the pods/exec
stream from the preview proxy) to the socket, the socket to its stdout. End of stdin, or
of the connection, ends it. Exit 3: nothing listens on the port. Standard library only
(sent as source text, once per preview connection, so it imports little).
"""

import os
import socket
import sys
import threading

CHUNK = 262144
EXIT_REFUSED = 3


def inbound(conn: socket.socket) -> None:
    try:
        while True:
            data = os.read(0, CHUNK)
            if not data:
                break
            conn.sendall(data)
    except OSError:
        pass
    os._exit(0)


def outbound(conn: socket.socket) -> None:
    try:
        while True:
            data = conn.recv(CHUNK)
            if not data:
                break
            view = memoryview(data)
            while view:
                view = view[os.write(1, view) :]
    except OSError:
        pass


def main(port: int) -> None:
    try:
        conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError as error:
        sys.stderr.write(f"openblox-relay: connect 127.0.0.1:{port}: {error}\n")
        sys.stderr.flush()
        os._exit(EXIT_REFUSED)
    conn.settimeout(None)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=inbound, args=(conn,), daemon=True).start()
    outbound(conn)
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]))
