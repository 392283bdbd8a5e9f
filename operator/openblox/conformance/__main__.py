"""``python -m openblox.conformance``: run the suite and write the scorecard.

    python -m openblox.conformance --backend operator --profile code-exec
    python -m openblox.conformance --backend bare-runc --out docs/conformance
    python -m openblox.conformance --json            # the JSON scorecard on stdout
    python -m openblox.conformance --json-log        # the same, each line marked (the Job)
    python -m openblox.conformance --list            # the properties, no cluster needed
    python -m openblox.conformance --cleanup         # delete namespaces left by killed runs

Exit status: 0 when no property failed, 1 when any did (the scorecard is written and
printed first), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys

from openblox.conformance.cluster_api import Kube
from openblox.conformance.properties import PROPERTIES, select
from openblox.conformance.runner import run_suite
from openblox.conformance.scorecard import Result, Status, slug
from openblox.conformance.settings import Settings

# What marks the scorecard's lines in a Job's log (--json-log; conformance/run.sh).
LOG_PREFIX = "scorecard| "


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m openblox.conformance",
        description="The openblox adversarial conformance suite.",
    )
    parser.add_argument(
        "--backend",
        default=None,
        help="operator (default), operator-raw-exec, bare-runc, or module:Class",
    )
    parser.add_argument(
        "--profile",
        action="append",
        dest="profiles",
        help="profile to test (repeatable; default code-exec, or none for bare-runc)",
    )
    parser.add_argument("--only", action="append", help="property IDs or prefixes (repeatable)")
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--image", default=None, help="image for canaries and the bare pod")
    parser.add_argument("--unavailable-profile", default=None)
    parser.add_argument("--restricted-profile", default=None)
    parser.add_argument("--processes", type=int, default=None, help="declared process cap")
    parser.add_argument("--out", default=None, help="directory for the JSON and Markdown files")
    parser.add_argument("--json", action="store_true", help="print the JSON scorecard on stdout")
    parser.add_argument(
        "--json-log",
        action="store_true",
        help=f"print the JSON scorecard on stdout, each line prefixed with {LOG_PREFIX!r}",
    )
    parser.add_argument("--keep", action="store_true", help="keep the run's namespaces")
    parser.add_argument("--list", action="store_true", help="list the properties and exit")
    parser.add_argument("--cleanup", action="store_true", help="delete leftover namespaces")
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    settings = Settings.from_environment()
    if args.backend:
        settings.backend = args.backend
    if args.profiles:
        settings.profiles = args.profiles
    elif args.backend:
        settings.profiles = settings.default_profiles()
    if args.only:
        settings.only = [i for item in args.only for i in item.split(",") if i]
    settings.kubeconfig = args.kubeconfig or settings.kubeconfig
    settings.image = args.image or settings.image
    if args.unavailable_profile is not None:
        settings.unavailable_profile = args.unavailable_profile or None
    settings.restricted_profile = args.restricted_profile or settings.restricted_profile
    settings.processes = args.processes or settings.processes
    settings.out = args.out or settings.out
    settings.keep = args.keep or settings.keep
    return settings


def progress(result: Result) -> None:
    mark = {Status.PASS: "pass", Status.FAIL: "FAIL", Status.UNSUPPORTED: "unsupported"}
    evidence = result.evidence if len(result.evidence) < 220 else result.evidence[:219] + "…"
    print(
        f"{result.id:9} {mark[result.status]:11} {result.seconds:5.1f}s  {evidence}",
        file=sys.stderr,
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.list:
        for prop in PROPERTIES:
            print(f"{prop.id:9} {prop.category.value:24} {prop.title}")
        return 0
    settings = settings_from(args)
    if args.cleanup:
        kube = Kube.connect(settings.kubeconfig)
        for name in kube.leftover_namespaces():
            kube.delete_namespace(name)
            print(f"deleted namespace {name}", file=sys.stderr)
        return 0
    try:
        chosen = select(settings.only)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    card = run_suite(settings, properties=chosen, on_result=progress)
    out = settings.out or (None if args.json or args.json_log else "conformance-results")
    if out:
        stem = slug("-".join(t.name for t in card.targets))
        json_path, md_path = card.write(out, stem)
        print(f"scorecard: {json_path} {md_path}", file=sys.stderr)
    for name, counts in card.summary().items():
        print(
            f"{name}: {counts['pass']} pass, {counts['fail']} fail, "
            f"{counts['unsupported']} unsupported in {card.seconds:.0f}s",
            file=sys.stderr,
            flush=True,
        )
    if args.json:
        print(json.dumps(card.to_json(), indent=2), flush=True)
    elif args.json_log:
        # A Job's log holds stdout and stderr together, interleaved line by line in the
        # order the runtime read them, so a stderr line can land inside the document.
        # Each line of it carries the prefix; conformance/run.sh keeps only those.
        for line in json.dumps(card.to_json(), indent=2).splitlines():
            print(f"{LOG_PREFIX}{line}")
        sys.stdout.flush()
    return 1 if card.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
