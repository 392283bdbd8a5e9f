#!/usr/bin/env bash
# Run the conformance suite as a Job in the cluster in KUBECONFIG and print its JSON
# scorecard on stdout (progress on stderr). Exits 0 if every property passed, 1 if any
# failed (the scorecard is printed either way), 2 if the Job could not run at all.
#
#   conformance/run.sh [--keep]     --keep: leave the Job (and its logs) in place
#   conformance/run.sh --parse-log  read a Job log on stdin: scorecard on stdout, the rest
#                                   on stderr (what a run does with the Job's log)
#
# OPENBLOX_CONFORMANCE_JOB_IMAGE: run the Job from this image instead of
# openblox.local/operator:0.1.0 (any image with the openblox package at /opt/openblox).
set -euo pipefail

# The Job prints the scorecard with --json-log: every line of the document carries this
# prefix, because the log interleaves stdout and stderr line by line.
PREFIX='scorecard| '
parse_log() {
  local line
  while IFS= read -r line || [[ -n $line ]]; do
    if [[ $line == "$PREFIX"* ]]; then printf '%s\n' "${line#"$PREFIX"}"; else printf '%s\n' "$line" >&2; fi
  done
}
if [[ ${1:-} == --parse-log ]]; then parse_log; exit 0; fi
# The embedded cluster's admin kubeconfig when none is configured.
if [[ -z ${KUBECONFIG:-} && ! -f $HOME/.kube/config && -f /var/lib/openblox/cluster/admin.kubeconfig ]]; then
  export KUBECONFIG=/var/lib/openblox/cluster/admin.kubeconfig
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ns=openblox-conformance
job=openblox-conformance
timeout=${OPENBLOX_CONFORMANCE_TIMEOUT:-1900}
keep=${1:-}

kubectl delete job -n "$ns" "$job" --ignore-not-found --wait=true >/dev/null
if [[ -n ${OPENBLOX_CONFORMANCE_JOB_IMAGE:-} ]]; then
  kubectl kustomize "$here" |
    sed "s#image: openblox.local/operator:0.1.0#image: $OPENBLOX_CONFORMANCE_JOB_IMAGE#" |
    kubectl apply -f - >/dev/null
else
  kubectl apply -k "$here" >/dev/null
fi
echo "conformance Job started; waiting up to ${timeout}s" >&2

deadline=$((SECONDS + timeout))
state=
while ((SECONDS < deadline)); do
  state=$(kubectl get job -n "$ns" "$job" \
    -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type}{" "}{end}' 2>/dev/null || true)
  case " $state " in
    *" Complete "* | *" Failed "*) break ;;
  esac
  sleep 5
done

logs=$(kubectl logs -n "$ns" "job/$job" 2>/dev/null || true)
scorecard=$(parse_log <<<"$logs")
[[ $keep == --keep ]] || kubectl delete job -n "$ns" "$job" --wait=false >/dev/null 2>&1 || true

if [[ -z $scorecard ]]; then
  echo "the Job printed no scorecard (state: ${state:-still running})" >&2
  exit 2
fi
printf '%s\n' "$scorecard"
case " $state " in
  *" Complete "*) exit 0 ;;
  *) exit 1 ;;
esac
