// The NRI plugin: gives a sandbox container the mount options and the process cap a pod
// spec cannot ask for.
//
// Kubernetes mounts emptyDirs without noexec and has no field for it, gVisor turns the
// /dev/shm that containerd provides into a tmpfs sized from the node's memory, and
// Kubernetes has no field for RLIMIT_NPROC. For the container named "sandbox" in a pod
// that carries the openblox.sh/sandbox label, with any value (a warm pool pod's is empty
// until a Sandbox claims it, and it is handed out with what it started with), this plugin:
//   - adds noexec, nosuid and nodev to the /tmp, /workspace and /run/openblox mounts;
//   - replaces /dev/shm with a tmpfs of at most 64 MiB (no larger than /tmp), noexec,
//     nosuid and nodev, which runsc mounts inside the Sentry with that size;
//   - sets a hard and soft RLIMIT_NPROC at the pod's openblox.sh/processes annotation
//     (the profile's process cap, which only the operator can write: admission lets no
//     one else create a sandbox-labelled pod). containerd copies the container's rlimits
//     into every exec of it, and gVisor counts the tasks of the sandbox's uid against it.
//
// The agent connects it to containerd's NRI socket as an external plugin named
// "openblox", the name sandbox pods require (required-plugins.noderesource.dev): while it
// is not connected, NRI's default validator refuses to create a sandbox container. It
// changes only the options of mounts the pod spec already has; it adds no host path and
// no device.
package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"golang.org/x/sys/unix"
)

const (
	sandboxLabel        = "openblox.sh/sandbox"
	processesAnnotation = "openblox.sh/processes"
	containerName       = "sandbox"
	shmMaxBytes         = 64 << 20
	// The profile's default cap, for a pod made by an operator that predates the
	// annotation: such a pod still gets a cap, never none.
	defaultProcesses = 256
	maxProcesses     = 1 << 20
)

var scratchMounts = []string{"/tmp", "/workspace", "/run/openblox"}

type plugin struct{}

func (plugin) CreateContainer(
	_ context.Context, pod *api.PodSandbox, ctr *api.Container,
) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if _, labelled := pod.GetLabels()[sandboxLabel]; !labelled || ctr.GetName() != containerName {
		return nil, nil, nil
	}
	processes, err := processCap(pod.GetAnnotations())
	if err != nil {
		// Fail closed: the container does not start without its cap.
		return nil, nil, err
	}
	adjust := adjustments(ctr.GetMounts())
	adjust.AddRlimit("RLIMIT_NPROC", processes, processes)
	return adjust, nil, nil
}

// processCap is the pod's process cap from its annotation, or the profile default when
// the annotation is absent; a value that is not a positive count is refused.
func processCap(annotations map[string]string) (uint64, error) {
	text, present := annotations[processesAnnotation]
	if !present {
		return defaultProcesses, nil
	}
	count, err := strconv.ParseUint(text, 10, 64)
	if err != nil || count == 0 || count > maxProcesses {
		return 0, errors.New("openblox-node-agent: annotation " + processesAnnotation + "=" +
			strconv.Quote(text) + " is not a process count between 1 and " +
			strconv.Itoa(maxProcesses) + "; refusing to start the sandbox container")
	}
	return count, nil
}

func adjustments(mounts []*api.Mount) *api.ContainerAdjustment {
	adjust := &api.ContainerAdjustment{}
	shmBytes := int64(shmMaxBytes)
	for _, m := range mounts {
		if !slices.Contains(scratchMounts, m.Destination) {
			continue
		}
		adjust.AddMount(&api.Mount{
			Destination: m.Destination,
			Type:        m.Type,
			Source:      m.Source,
			Options:     withOptions(m.Options, "noexec", "nosuid", "nodev"),
		})
		if m.Destination == "/tmp" {
			if size := tmpfsSize(m.Source); size > 0 && size < shmBytes {
				shmBytes = size
			}
		}
	}
	adjust.AddMount(&api.Mount{
		Destination: "/dev/shm",
		Type:        "tmpfs",
		Source:      "shm",
		Options: []string{
			"rw", "nosuid", "nodev", "noexec", "mode=1777",
			"size=" + strconv.FormatInt(shmBytes, 10),
		},
	})
	return adjust
}

func withOptions(options []string, added ...string) []string {
	result := slices.Clone(options)
	for _, option := range added {
		if !slices.Contains(result, option) {
			result = append(result, option)
		}
	}
	return result
}

// tmpfsSize is the size of the host tmpfs behind a memory-backed emptyDir (the kubelet
// mounts it with the volume's sizeLimit), or 0 if it cannot be read.
func tmpfsSize(path string) int64 {
	var fs unix.Statfs_t
	if path == "" || unix.Statfs(path, &fs) != nil || fs.Type != unix.TMPFS_MAGIC {
		return 0
	}
	return int64(fs.Blocks) * fs.Bsize
}

// nriPlugin is the plugin's connection to containerd: made again after it closes.
type nriPlugin struct {
	socket     string
	mu         sync.Mutex
	connected  bool
	lastError  string
	generation int // of the latest connection attempt
	closedGen  int // of the latest connection that went down
}

const (
	pluginName = "openblox"
	pluginIdx  = "10"
)

// ensure connects the plugin unless it is connected; closed is sent to when a connection
// that was made goes down. The lock is not held while connecting: the stub may call
// its close callback from inside Start.
func (n *nriPlugin) ensure(ctx context.Context, closed chan<- struct{}) {
	n.mu.Lock()
	if n.connected {
		n.mu.Unlock()
		return
	}
	n.generation++
	gen := n.generation
	n.mu.Unlock()
	s, err := stub.New(plugin{},
		stub.WithPluginName(pluginName), stub.WithPluginIdx(pluginIdx),
		stub.WithSocketPath(n.socket),
		stub.WithOnClose(func() {
			n.mu.Lock()
			n.closedGen = gen
			if n.generation == gen {
				n.connected = false
				n.lastError = "containerd closed the NRI connection"
			}
			n.mu.Unlock()
			select {
			case closed <- struct{}{}:
			default:
			}
		}))
	if err == nil {
		err = s.Start(ctx)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case err != nil:
		n.lastError = fmt.Sprintf("cannot connect to containerd's NRI socket %s: %v", n.socket, err)
	case n.closedGen == gen:
		// It went down before it was ever counted as up.
	default:
		n.connected, n.lastError = true, ""
	}
}

// state is whether the plugin is connected, and why not.
func (n *nriPlugin) state() (bool, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.connected, n.lastError
}
