"""Write a wrapper Go module so a module with local `replace` directives can be built.

`k8s.io/kubernetes` and `go.etcd.io/etcd/server/v3` point their sibling modules at
paths inside their own repositories, which `go install mod@version` refuses. A wrapper
module that requires the main module and replaces each sibling with its published
version builds the same source through the Go module proxy.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

LOCAL_REPLACE = re.compile(r"^\s*(?:replace\s+)?(\S+)\s+=>\s+(\.\.?/\S+)\s*$")


def local_replacements(go_mod: str) -> list[str]:
    """Module paths that the go.mod replaces with a directory of its own repository."""
    found = []
    for line in go_mod.splitlines():
        match = LOCAL_REPLACE.match(line)
        if match and "FORBIDDEN" not in match.group(2):
            found.append(match.group(1))
    return found


def main() -> None:
    workdir, module, version, sibling_version = sys.argv[1:5]
    info = json.loads(
        subprocess.run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    go_mod = Path(info["GoMod"]).read_text()
    lines = [
        "module openblox.local/wrapper",
        "",
        "go 1.24.0",
        "",
        f"require {module} {version}",
        "",
    ]
    for sibling in local_replacements(go_mod):
        lines.append(f"replace {sibling} => {sibling} {sibling_version}")
    Path(workdir, "go.mod").write_text("\n".join(lines) + "\n")
    Path(workdir, "wrapper.go").write_text("package wrapper\n")


if __name__ == "__main__":
    main()
