"""`openblox`: run code in a sandbox from a shell. Human output by default, --json for machines."""

from __future__ import annotations

import argparse
import http.client
import json
import math
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from openblox.client import Client, ExecResult, OpenbloxClientError, Sandbox
from openblox.client.errors import denial_of
from openblox.client.processes import LOG_BYTES
from openblox.denials import Denial
from openblox.names import COMMAND, ConditionType
from openblox.transport import ApiError, CredentialsError


def _spinner(message: str, done: threading.Event) -> None:
    """A progress line on stderr while waiting; silent when stderr is not a terminal."""
    if not sys.stderr.isatty():
        return
    frames = "|/-\\"
    started = time.monotonic()
    index = 0
    while not done.wait(0.2):
        sys.stderr.write(f"\r{message} {frames[index % 4]} {time.monotonic() - started:4.1f}s")
        sys.stderr.flush()
        index += 1
    sys.stderr.write("\r" + " " * (len(message) + 12) + "\r")


def _create(client: Client, args: argparse.Namespace) -> Sandbox:
    done = threading.Event()
    spinner = threading.Thread(target=_spinner, args=("waiting for sandbox", done), daemon=True)
    spinner.start()
    try:
        return client.create(args.profile, getattr(args, "name", None), timeout=args.timeout)
    finally:
        done.set()
        spinner.join()


def _emit_exec(result: ExecResult, as_json: bool) -> int:
    if as_json:
        print(
            json.dumps(
                {
                    "exit_code": result.exit_code,
                    "timed_out": result.timed_out,
                    "truncated": result.truncated,
                    "duration": round(result.duration, 4),
                    "stdout": result.stdout.decode("utf-8", "replace"),
                    "stderr": result.stderr.decode("utf-8", "replace"),
                    "denials": [denial.to_dict() for denial in result.denials],
                }
            )
        )
    else:
        sys.stdout.buffer.write(result.stdout)
        sys.stdout.flush()
        sys.stderr.buffer.write(result.stderr)
        if result.truncated:
            print("openblox: output was cut at the profile's cap", file=sys.stderr)
        if result.timed_out:
            print(
                "openblox: the command timed out; every process it started was killed",
                file=sys.stderr,
            )
        for denial in result.denials:
            print(
                f"openblox: denied {denial.denied}: {denial.attempted} ({denial.because})",
                file=sys.stderr,
            )
    return result.exit_code


def _stdin_bytes(args: argparse.Namespace) -> bytes | None:
    return sys.stdin.buffer.read() if getattr(args, "stdin", False) else None


def cmd_run(client: Client, args: argparse.Namespace) -> int:
    sandbox = _create(client, args)
    try:
        return _emit_exec(sandbox.exec(args.argv, stdin=_stdin_bytes(args)), args.json)
    finally:
        sandbox.delete()


def cmd_create(client: Client, args: argparse.Namespace) -> int:
    sandbox = _create(client, args)
    print(
        json.dumps({"name": sandbox.name, "namespace": sandbox.namespace})
        if args.json
        else sandbox.name
    )
    return 0


def cmd_exec(client: Client, args: argparse.Namespace) -> int:
    return _emit_exec(client.get(args.name).exec(args.argv, stdin=_stdin_bytes(args)), args.json)


def cmd_ls(client: Client, args: argparse.Namespace) -> int:
    rows = []
    for sandbox in client.list():
        ready: dict[str, Any] = next(
            (
                c
                for c in sandbox.status.get("conditions") or []
                if c.get("type") == ConditionType.READY
            ),
            {},
        )
        rows.append(
            {
                "name": sandbox.name,
                "profile": sandbox.profile,
                "ready": ready.get("status", "Unknown"),
                "reason": ready.get("reason", ""),
                "boundary": sandbox.status.get("boundary", ""),
                "expires": sandbox.status.get("expiresAt", ""),
            }
        )
    if args.json:
        print(json.dumps(rows))
    else:
        print(f"{'NAME':24} {'PROFILE':16} {'READY':6} {'REASON':18} {'BOUNDARY':9} EXPIRES")
        for row in rows:
            print(
                f"{row['name']:24} {row['profile']:16} {row['ready']:6} {row['reason']:18} "
                f"{row['boundary']:9} {row['expires']}"
            )
    return 0


def cmd_rm(client: Client, args: argparse.Namespace) -> int:
    for name in args.names:
        client.delete(name)
    return 0


def cmd_profiles(client: Client, args: argparse.Namespace) -> int:
    names = client.profiles()
    print(json.dumps(names) if args.json else "\n".join(names))
    return 0


def cmd_cp(client: Client, args: argparse.Namespace) -> int:
    """`cp NAME:PATH LOCAL` or `cp LOCAL NAME:PATH`."""
    source, target = args.source, args.target
    if ":" in source and ":" not in target:
        name, path = source.split(":", 1)
        Path(target).write_bytes(client.get(name).files.read(path))
        return 0
    if ":" in target and ":" not in source:
        name, path = target.split(":", 1)
        client.get(name).files.write(path, Path(source).read_bytes())
        return 0
    raise OpenbloxClientError("cp needs exactly one side written as SANDBOX:PATH")


# --- background commands ----------------------------------------------------------------


def cmd_start(client: Client, args: argparse.Namespace) -> int:
    process = client.get(args.name).start_process(args.process, args.argv)
    if args.json:
        print(json.dumps(dict(process.to_dict(), started=process.started)))
    else:
        state = "started" if process.started else "already running"
        print(f"{process.name}: {state} (pid {process.pid})")
    return 0


def cmd_ps(client: Client, args: argparse.Namespace) -> int:
    processes = client.get(args.name).processes()
    for note in processes.notes():  # on stderr, so stdout keeps its shape
        print(f"openblox: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps([p.to_dict() for p in processes]))
        return 0
    print(f"{'NAME':20} {'STATE':10} {'PID':>6} {'EXIT':>4}  COMMAND")
    for process in processes:
        state = "running" if process.running else ("stopped" if process.stopped else "exited")
        code = "" if process.exit_code is None else str(process.exit_code)
        print(
            f"{process.name:20} {state:10} {process.pid or '':>6} {code:>4}  "
            f"{' '.join(process.argv)}"
        )
    return 0


def cmd_stop(client: Client, args: argparse.Namespace) -> int:
    process = client.get(args.name).stop_process(args.process, grace=args.grace)
    print(json.dumps(process.to_dict()) if args.json else f"{process.name}: stopped")
    return 0


def cmd_logs(client: Client, args: argparse.Namespace) -> int:
    data = client.get(args.name).logs(args.process, stream=args.stream, limit=args.limit)
    if args.json:
        print(
            json.dumps(
                {
                    "name": args.process,
                    "stream": args.stream,
                    "data": data.decode("utf-8", "replace"),
                }
            )
        )
    else:
        sys.stdout.buffer.write(data)
    return 0


def _add_processes(sub: Any) -> None:
    start = sub("start", cmd_start, "start a named background command in a sandbox")
    start.add_argument("name")
    start.add_argument("process", help="a name for the command; starting it again is a no-op")
    start.add_argument("argv", nargs=argparse.REMAINDER)
    ps = sub("ps", cmd_ps, "list a sandbox's background commands")
    ps.add_argument("name")
    stop = sub("stop", cmd_stop, "stop a background command and everything it started")
    stop.add_argument("name")
    stop.add_argument("process")
    stop.add_argument("--grace", type=_seconds, default=2.0, help="seconds between TERM and KILL")
    logs = sub("logs", cmd_logs, "print what a background command wrote")
    logs.add_argument("name")
    logs.add_argument("process")
    logs.add_argument("--stream", choices=("stdout", "stderr"), default="stdout")
    logs.add_argument(
        "--limit", type=_byte_count, default=LOG_BYTES, help="the last this many bytes"
    )


# --- preview links (docs/preview.md) -------------------------------------------------


def cmd_preview(client: Client, args: argparse.Namespace) -> int:
    """Print a signed, expiring link to a loopback port inside a sandbox."""
    url = client.get(args.name).preview_url(args.port, ttl=args.ttl, base_url=args.base_url)
    if args.json:
        print(json.dumps({"url": url, "expires_in": args.ttl}))
    else:
        print(url)
    return 0


def _add_preview(sub: Any) -> None:
    preview = sub("preview", cmd_preview, "print a signed link to a port inside a sandbox")
    preview.add_argument("name")
    preview.add_argument("port", type=_port)
    preview.add_argument("--ttl", type=_seconds, default=3600, help="seconds the link is valid")
    preview.add_argument(
        "--base-url", help="the proxy's public address (default: from the cluster)"
    )


# --- end of preview links ------------------------------------------------------------


def _seconds(text: str) -> float:
    """A finite number of seconds, 0 or more: argparse would take nan, inf and -1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, 0 or more")
    return value


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port in 1..65535")
    return int(text)


def _byte_count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes")
    return int(text)


# --- the MCP server (docs/mcp.md) ----------------------------------------------------


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve the sandbox tools over MCP on stdin/stdout until the client hangs up."""
    # Imported here: the SDK is the `mcp` extra, and no other command needs it.
    from openblox.agent_tools.stdio import serve

    return serve(args)


def _add_mcp(sub: Any) -> None:
    mcp = sub("mcp", cmd_mcp, "serve sandbox tools to an agent over MCP (stdio)")
    mcp.add_argument("--profile", default="code-exec", help="the profile every sandbox uses")
    mcp.add_argument(
        "--idle-timeout",
        type=int,
        help="delete the sandbox after this many idle seconds (may only shorten the profile's)",
    )
    mcp.add_argument(
        "--max-age", type=int, help="the sandbox's most seconds (may only shorten the profile's)"
    )
    mcp.add_argument(
        "--create-timeout", type=float, default=120.0, help="seconds to wait for Ready"
    )
    mcp.add_argument(
        "--preview-ttl", type=float, default=3600, help="seconds a preview link is valid"
    )
    mcp.add_argument("--preview-base-url", help="the preview proxy's public address")


# --- end of the MCP server ------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    top.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig's)")
    top.add_argument("--kubeconfig")
    top.add_argument("--json", action="store_true", help="machine-readable output")
    commands = top.add_subparsers(dest="command", required=True)

    def sub(name: str, handler: Any, help_text: str) -> argparse.ArgumentParser:
        command = commands.add_parser(name, help=help_text)
        command.set_defaults(handler=handler)
        return command

    run = sub("run", cmd_run, "create a sandbox, run one command, delete the sandbox")
    create = sub("create", cmd_create, "create a sandbox and wait until it is ready")
    for command in (run, create):
        command.add_argument("--profile", default="code-exec")
        command.add_argument(
            "--timeout", type=_seconds, default=120.0, help="seconds to wait for Ready"
        )
    create.add_argument("name", nargs="?")
    run.add_argument("--stdin", action="store_true", help="pass this command's stdin")
    run.add_argument("argv", nargs=argparse.REMAINDER)
    exec_ = sub("exec", cmd_exec, "run a command in an existing sandbox")
    exec_.add_argument("--stdin", action="store_true", help="pass this command's stdin")
    exec_.add_argument("name")
    exec_.add_argument("argv", nargs=argparse.REMAINDER)
    sub("ls", cmd_ls, "list sandboxes")
    rm = sub("rm", cmd_rm, "delete sandboxes")
    rm.add_argument("names", nargs="+")
    sub(
        "profiles",
        cmd_profiles,
        "list the profiles admission accepts (a namespace may allow fewer)",
    )
    cp = sub("cp", cmd_cp, "copy a file into or out of a sandbox")
    cp.add_argument("source")
    cp.add_argument("target")
    _add_processes(sub)
    _add_preview(sub)
    _add_mcp(sub)
    return top


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if hasattr(args, "argv"):
        if args.argv and args.argv[0] == "--":
            args.argv = args.argv[1:]
        if not args.argv:
            parser().error("a command to run is needed after --")
    if args.command == "mcp":
        # stdout is the protocol's: no client is made here, and errors go to stderr.
        sys.exit(cmd_mcp(args))
    try:
        client = Client(args.namespace, kubeconfig=args.kubeconfig)
        sys.exit(args.handler(client, args))
    except OpenbloxClientError as error:
        _fail(args, type(error).__name__, str(error), denial_of(error))
    except (CredentialsError, FileNotFoundError) as error:
        _fail(args, "ConfigError", f"cannot load the kubeconfig: {error}")
    except ApiError as error:
        _fail(args, "ApiError", f"the API server answered {error.status} {error.reason}")
    except (OSError, http.client.HTTPException) as error:
        _fail(args, "Unreachable", f"cannot reach the API server: {error}")


def _fail(
    args: argparse.Namespace, kind: str, message: str, record: Denial | None = None
) -> NoReturn:
    if args.json:
        denial = record.to_dict() if record is not None else None
        print(json.dumps({"error": kind, "message": message, "denial": denial}))
    else:
        print(f"openblox: {message}", file=sys.stderr)
    sys.exit(2)
