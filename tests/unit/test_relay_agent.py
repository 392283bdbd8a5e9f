"""The preview relay's agent (guest/relay_agent.py), run on this host as the proxy runs it in
a sandbox: `python3 -I -S -c <agent> PORT`, against a loopback listener this test starts."""

import contextlib
import io
import socket
import subprocess
import sys
import threading
from subprocess import PIPE

from openblox.preview.relay import AGENT_EXIT_REFUSED, agent_argv


def _argv(port: int) -> list[str]:
    return [sys.executable, *agent_argv(port)[1:]]


def test_the_agent_copies_bytes_both_ways_and_ends_with_its_stdin() -> None:
    payload = b"hello relay\n" * 50_000
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        received = bytearray()

        def serve() -> None:
            conn, _ = server.accept()
            with conn, contextlib.suppress(OSError):
                while data := conn.recv(65536):
                    received.extend(data)
                    conn.sendall(data.upper())

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        agent = subprocess.Popen(_argv(port), stdin=PIPE, stdout=PIPE, stderr=PIPE)
        assert agent.stdin is not None and agent.stdout is not None
        writer = threading.Thread(target=agent.stdin.write, args=(payload,), daemon=True)
        writer.start()
        echoed = bytearray()
        stdout = agent.stdout
        assert isinstance(stdout, io.BufferedReader)  # what Popen gives when not unbuffered
        while len(echoed) < len(payload) and (data := stdout.read1(65536)):
            echoed.extend(data)
        writer.join(10)
        agent.stdin.close()  # end of stdin ends the relay, as closing the tunnel does
        assert agent.wait(10) == 0, agent.stderr.read() if agent.stderr else b""
        thread.join(10)
    assert bytes(received) == payload
    assert bytes(echoed) == payload.upper()


def test_the_agent_exits_3_and_says_so_when_nothing_listens() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    # The listener is closed: nothing answers on that loopback port now.
    done = subprocess.run(_argv(port), check=False, input=b"", capture_output=True, timeout=30)
    assert done.returncode == AGENT_EXIT_REFUSED
    assert f"connect 127.0.0.1:{port}".encode() in done.stderr
