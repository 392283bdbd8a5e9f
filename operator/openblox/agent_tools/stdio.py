"""Run the MCP server on stdin/stdout for one session, and delete its sandbox at the end.

On stdio one process is one session. However it ends (the client closes stdin, or sends
SIGTERM, as the SDK's client does after a grace period, or SIGINT/SIGHUP), the session's
sandbox is deleted before the process exits. If the process is killed outright, the
operator's idle timeout reaps the sandbox: nothing stamps its activity any more.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from types import FrameType

from openblox.agent_tools.server import build_server
from openblox.agent_tools.session import SandboxSession, SessionConfig


def config_from(args: argparse.Namespace) -> SessionConfig:
    for flag, value in (("--idle-timeout", args.idle_timeout), ("--max-age", args.max_age)):
        if value is not None and value < 1:
            raise SystemExit(f"openblox mcp: {flag} must be at least 1 second, not {value}")
    return SessionConfig(
        profile=args.profile,
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        idle_timeout_seconds=args.idle_timeout,
        max_age_seconds=args.max_age,
        create_timeout_seconds=args.create_timeout,
        preview_ttl_seconds=args.preview_ttl,
        preview_base_url=args.preview_base_url,
    )


def serve(args: argparse.Namespace) -> int:
    session = SandboxSession(config_from(args))
    server = build_server(session)

    def end(signum: int, _frame: FrameType | None) -> None:
        # A worker thread may be mid-exec; the process is ending anyway, so delete the
        # sandbox from here and leave without waiting for it.
        try:
            session.close()
        except Exception as error:
            print(f"openblox mcp: could not delete the sandbox: {error}", file=sys.stderr)
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, end)
    try:
        server.run("stdio")
    finally:
        session.close()
    return 0
