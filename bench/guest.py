"""Programs the benchmarks run inside sandboxes and containers, sent as `python3 -c` text.

Standard library only; each prints one JSON line. Kept as strings so the same bytes run
natively, under `runsc do`, in a runc pod and in a gVisor pod.
"""

# Per-operation cost of a few syscalls and of process creation, each measured for a
# fixed wall-clock budget (so ptrace's ~100 us syscalls do not take minutes).
MICRO = r"""
import json, os, subprocess, sys, time

budget = float(sys.argv[1]) if len(sys.argv) > 1 else 0.5


def per_op(fn, batch):
    fn()
    done = 0
    start = time.perf_counter()
    while True:
        for _ in range(batch):
            fn()
        done += batch
        elapsed = time.perf_counter() - start
        if elapsed >= budget:
            return elapsed / done * 1e9


fd = os.open("/etc/hostname", os.O_RDONLY)
results = {
    "getpid_ns": per_op(os.getpid, 200),
    "stat_ns": per_op(lambda: os.stat("/etc/hostname"), 100),
    "pread_ns": per_op(lambda: os.pread(fd, 64, 0), 100),
    "open_close_ns": per_op(lambda: os.close(os.open("/etc/hostname", os.O_RDONLY)), 50),
    "spawn_true_ns": per_op(lambda: subprocess.run(["/bin/true"], check=True), 1),
}
start = time.perf_counter()
total = 0
for i in range(3_000_000):
    total += i * i
results["cpu_loop_ns"] = (time.perf_counter() - start) * 1e9
results["kernel"] = os.uname().release
print(json.dumps(results), flush=True)
"""

# One CPU-bound job: pure interpreter work, no syscalls to speak of (~0.4 s natively here).
JOB_CPU = "t = 0\nfor i in range(4_000_000):\n    t += i * i\n"

# One syscall-heavy job: metadata and small-file I/O, the shape of a build or a test run.
JOB_SYSCALL = r"""
import os
path = "/tmp/job-%d" % os.getpid()
for i in range(2000):
    os.stat("/etc/hostname")
for i in range(300):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, b"x" * 4096)
    os.close(fd)
    with open(path, "rb") as handle:
        handle.read()
os.unlink(path)
for i in range(50):
    os.listdir("/usr/lib/python3")
"""

# Runs jobs back to back in `workers` parallel loops for `seconds`, each job a fresh
# python3 process (as a caller's generated code would be), and reports completions.
DRIVER = r"""
import json, subprocess, sys, threading, time

job, workers, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
durations = []
lock = threading.Lock()
deadline = time.monotonic() + seconds


def loop():
    while time.monotonic() < deadline:
        start = time.monotonic()
        subprocess.run([sys.executable, "-c", job], check=True)
        end = time.monotonic()
        if end <= deadline:
            with lock:
                durations.append(end - start)


threads = [threading.Thread(target=loop) for _ in range(workers)]
begin = time.monotonic()
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"completed": len(durations), "seconds": seconds, "durations": durations}))
"""
