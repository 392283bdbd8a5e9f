"""`make bench`: every figure side by side with its baseline, measured in one run.

    python -m bench                   # every section but cluster-up (about 25 minutes)
    python -m bench --quick           # tiny iteration counts: a smoke test of the harness
    python -m bench --only exec,files # some sections only
    python -m bench --only cluster-up # cold/warm `cluster/cluster.sh up` (restarts the cluster!)

Results go to docs/benchmarks/results.json, results.md and PNG plots beside them.
"""
