"""Scripts the suite sends into sandboxes and canaries as ``python3 -c <source> ARGS``.

They are standard library only and self-contained, so they run in any image with a
``python3``. Each prints one JSON object as its last line of stdout.
"""

from importlib import resources

PROBE = "probe.py"
CANARY = "canary.py"


def source(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text()
