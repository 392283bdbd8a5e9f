// openblox-node-agent prepares a node for openblox's sandboxes and says on the Node,
// where the scheduler honours it, whether the node may run them.
//
// It runs on each node an admin marked for gVisor (openblox.sh/gvisor=true), as a
// DaemonSet pod (manifests/node-agent.yaml). Every round it
//   - installs the sandbox seccomp profile where the kubelet reads Localhost profiles,
//     replacing a file there that differs (an Event says so);
//   - connects its NRI plugin (nri.go) to containerd's NRI socket, again if it dropped;
//   - checks that the runtime reports a runsc handler and that the handler's options
//     file turns gVisor's networking off (network = "none");
//   - sets the label openblox.sh/gvisor-ready=true, which the gvisor RuntimeClass's
//     node selector requires, only while every check holds, and the Node condition
//     OpenbloxSandboxesReady with the reason and the words of what is missing;
//   - renews a Lease named after the node: an agent that is gone or wedged cannot take
//     its label off, so the operator does, once the Lease is not renewed.
//
// On SIGTERM it takes the label off before it exits. It never touches a pod.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	readyLabel    = "openblox.sh/gvisor-ready"
	conditionType = "OpenbloxSandboxesReady"
	// What the stopping agent has for its last word: a read and two writes (the label,
	// then the condition). 5 s was once too little on a loaded node: the label came off
	// and the condition still said Prepared. The pod's grace is 15 s
	// (manifests/node-agent.yaml), so 12 s leaves the kubelet's SIGKILL room.
	stopTimeout = 12 * time.Second
)

type settings struct {
	node, pod, namespace               string
	seccompDir, runscConfig, nriSocket string
	interval                           time.Duration
	leaseSeconds                       int
}

func settingsFromEnv() (settings, error) {
	s := settings{
		node:        os.Getenv("NODE_NAME"),
		pod:         os.Getenv("POD_NAME"),
		namespace:   os.Getenv("POD_NAMESPACE"),
		seccompDir:  envOr("SECCOMP_DIR", "/var/lib/kubelet/seccomp/openblox"),
		runscConfig: envOr("RUNSC_CONFIG", "/etc/containerd/runsc.toml"),
		nriSocket:   envOr("NRI_SOCKET", "/var/run/nri/nri.sock"),
	}
	interval, err := strconv.Atoi(envOr("INTERVAL_SECONDS", "10"))
	if err != nil || interval < 1 {
		return s, fmt.Errorf("INTERVAL_SECONDS=%q is not a positive number of seconds", os.Getenv("INTERVAL_SECONDS"))
	}
	s.interval = time.Duration(interval) * time.Second
	// Three rounds missed, and the operator takes the node's label off.
	s.leaseSeconds = 4 * interval
	for name, value := range map[string]string{"NODE_NAME": s.node, "POD_NAME": s.pod, "POD_NAMESPACE": s.namespace} {
		if value == "" {
			return s, fmt.Errorf("%s is unset (the DaemonSet passes it from the downward API)", name)
		}
	}
	return s, nil
}

func envOr(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}

// verdict is what the agent publishes: whether the node may run sandboxes, and why.
type verdict struct {
	ready           bool
	reason, message string
}

func verdictOf(lacks []lack) verdict {
	if len(lacks) == 0 {
		return verdict{true, "Prepared", "seccomp profile installed, runsc handler with " +
			"network \"none\", NRI plugin connected"}
	}
	words := make([]string, len(lacks))
	for i, l := range lacks {
		words[i] = l.Message
	}
	return verdict{false, lacks[0].Reason, strings.Join(words, "; ")}
}

type agent struct {
	kube   *kube
	cfg    settings
	nri    *nriPlugin
	closed chan struct{}
}

// round checks everything and returns the verdict, with the Node as read (nil when it
// could not be read).
func (a *agent) round(ctx context.Context) (verdict, *node) {
	var lacks []lack
	replaced, problem := installSeccomp(a.cfg.seccompDir)
	if replaced {
		a.record(ctx, "Warning", "SeccompProfileReplaced", fmt.Sprintf(
			"the seccomp profile at %s differed from the one this agent ships, and was replaced",
			a.cfg.seccompDir))
	}
	if problem != nil {
		lacks = append(lacks, *problem)
	}
	if problem := checkRunscConfig(a.cfg.runscConfig); problem != nil {
		lacks = append(lacks, *problem)
	}
	found, err := a.kube.node(ctx, a.cfg.node)
	if err != nil {
		lacks = append(lacks, lack{"NodeUnreadable", fmt.Sprintf("cannot read node %s: %v", a.cfg.node, err)})
		found = nil
	} else if problem := checkHandler(found.handlers()); problem != nil {
		lacks = append(lacks, *problem)
	}
	a.nri.ensure(ctx, a.closed)
	if connected, why := a.nri.state(); !connected {
		lacks = append(lacks, lack{"NRIPluginNotConnected", why})
	}
	return verdictOf(lacks), found
}

// publish makes the Node say v: the label off before the condition says why, and the
// condition before the label goes on, so the label never promises more than the
// condition. Only what differs from the Node as read is written.
func (a *agent) publish(ctx context.Context, v verdict, current *node, now time.Time) error {
	labelled := current != nil && current.Metadata.Labels[readyLabel] == "true"
	if !v.ready && (labelled || current == nil) {
		if err := a.kube.setLabel(ctx, a.cfg.node, readyLabel, ""); err != nil {
			return fmt.Errorf("taking %s off: %w", readyLabel, err)
		}
	}
	status := map[bool]string{true: "True", false: "False"}[v.ready]
	var shown *condition
	if current != nil {
		shown = current.condition(conditionType)
	}
	if shown == nil || shown.Status != status || shown.Reason != v.reason || shown.Message != v.message {
		stamp := now.UTC().Format(time.RFC3339)
		transition := stamp
		if shown != nil && shown.Status == status {
			transition = shown.LastTransitionTime
		}
		c := condition{conditionType, status, v.reason, v.message, stamp, transition}
		if err := a.kube.setCondition(ctx, a.cfg.node, c); err != nil {
			return fmt.Errorf("setting condition %s: %w", conditionType, err)
		}
		log.Printf("node %s: ready=%v %s: %s", a.cfg.node, v.ready, v.reason, v.message)
		if shown == nil || shown.Status != status {
			kind := map[bool]string{true: "Normal", false: "Warning"}[v.ready]
			a.record(ctx, kind, v.reason, v.message)
		}
	}
	if v.ready && !labelled {
		if err := a.kube.setLabel(ctx, a.cfg.node, readyLabel, "true"); err != nil {
			return fmt.Errorf("setting %s: %w", readyLabel, err)
		}
	}
	return nil
}

func (a *agent) record(ctx context.Context, kind, reason, message string) {
	if err := a.kube.event(ctx, a.cfg.node, kind, reason, message, time.Now()); err != nil {
		log.Printf("event %s not recorded: %v", reason, err)
	}
}

func run() error {
	cfg, err := settingsFromEnv()
	if err != nil {
		return err
	}
	client, err := inCluster()
	if err != nil {
		return err
	}
	a := &agent{kube: client, cfg: cfg, nri: &nriPlugin{socket: cfg.nriSocket}, closed: make(chan struct{}, 1)}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ticker := time.NewTicker(cfg.interval)
	defer ticker.Stop()
	for {
		v, current := a.round(ctx)
		if ctx.Err() != nil {
			break
		}
		if err := a.publish(ctx, v, current, time.Now()); err != nil {
			log.Printf("node %s: %v", cfg.node, err)
		}
		if err := a.kube.renewLease(ctx, cfg.namespace, cfg.node, cfg.pod, cfg.leaseSeconds, time.Now()); err != nil {
			log.Printf("node %s: lease not renewed: %v", cfg.node, err)
		}
		select {
		case <-ctx.Done():
		case <-a.closed: // the plugin dropped: say so now, not at the next tick
		case <-ticker.C:
		}
		if ctx.Err() != nil {
			break
		}
	}
	// Stopping: the node stops taking sandbox pods before the plugin goes with the process.
	final, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	stopped := verdict{false, "AgentStopped", "the node agent stopped; sandboxes placed here " +
		"before keep running, new ones go to other nodes"}
	current, err := a.kube.node(final, cfg.node)
	if err != nil {
		current = nil
	}
	return a.publish(final, stopped, current, time.Now())
}

func main() {
	log.SetFlags(log.LstdFlags | log.LUTC)
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "openblox-node-agent: %v\n", err)
		os.Exit(1)
	}
}
