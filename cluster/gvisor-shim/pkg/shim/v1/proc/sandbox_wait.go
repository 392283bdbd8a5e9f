// Added to gVisor's shim (package pkg/shim/v1/proc) by openblox's cluster/build.sh;
// docs/adr/0012-the-shim-waits-without-a-runsc-process.md says why.

package proc

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/control/client"
	"gvisor.dev/gvisor/pkg/shim/v1/runsccmd"
)

// containerWait is the sandbox controller's method that `runsc wait` calls.
const containerWait = "containerManager.Wait"

// unixPathMax is the longest path a unix socket address holds (sun_path).
const unixPathMax = 108

// sandboxStopTimeout is how long `runsc wait` gives a root container's sandbox process
// to exit after the container did.
const sandboxStopTimeout = 2 * time.Minute

// waitForContainer returns the exit status of container id, as `runsc wait id` does,
// but by making that command's one RPC to the sandbox from the shim itself. Upstream
// keeps a `runsc wait` process per container for the container's whole life, about
// 3 MiB of host memory each. Whenever the direct call cannot answer (no state file, no
// control socket, the sandbox gone during the call) it runs `runsc wait`, so every
// failure is reported exactly as before.
func waitForContainer(r *runsccmd.Runsc, id string) (int, error) {
	sandbox, err := sandboxOf(r.Root, id)
	if err != nil {
		return r.Wait(context.Background(), id)
	}
	status, err := callWait(sandbox.ControlSocketPath, id)
	if err != nil {
		return r.Wait(context.Background(), id)
	}
	if sandbox.ID == id {
		if err := waitForExit(sandbox.Pid, sandboxStopTimeout); err != nil {
			return 0, err
		}
	}
	return exitCode(status), nil
}

// sandboxState is the part of runsc's container state file this needs.
type sandboxState struct {
	ID                string `json:"id"`
	Pid               int    `json:"pid"`
	ControlSocketPath string `json:"controlSocketPath"`
}

// sandboxOf reads container id's sandbox from runsc's state file
// (<root>/<container id>_sandbox:<sandbox id>.state).
func sandboxOf(root, id string) (sandboxState, error) {
	paths, err := filepath.Glob(filepath.Join(root, id+"_sandbox:*.state"))
	if err != nil || len(paths) != 1 {
		return sandboxState{}, fmt.Errorf("state file of container %q: %d found (%v)", id, len(paths), err)
	}
	raw, err := os.ReadFile(paths[0])
	if err != nil {
		return sandboxState{}, err
	}
	var state struct {
		Sandbox *sandboxState `json:"sandbox"`
	}
	if err := json.Unmarshal(raw, &state); err != nil {
		return sandboxState{}, err
	}
	if state.Sandbox == nil || state.Sandbox.ControlSocketPath == "" || state.Sandbox.Pid <= 0 {
		return sandboxState{}, fmt.Errorf("state file %q names no running sandbox", paths[0])
	}
	return *state.Sandbox, nil
}

// callWait blocks until the sandbox reports container id's exit.
func callWait(socket, id string) (unix.WaitStatus, error) {
	if len(socket) >= unixPathMax {
		// Too long for sockaddr_un: connect through /proc/self/fd, as runsc does.
		fd, err := unix.Open(socket, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, err
		}
		defer unix.Close(fd)
		socket = fmt.Sprintf("/proc/self/fd/%d", fd)
	}
	conn, err := client.ConnectTo(socket)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var status unix.WaitStatus
	err = conn.Call(containerWait, &id, &status)
	return status, err
}

// waitForExit waits for a process that is not the shim's child to be gone.
func waitForExit(pid int, timeout time.Duration) error {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err == unix.ESRCH {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open(%d): %w", pid, err)
	}
	defer unix.Close(pidfd)
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline).Milliseconds()
		if left <= 0 {
			return fmt.Errorf("sandbox process %d still running after %v", pid, timeout)
		}
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll on pidfd of %d: %w", pid, err)
		}
		if n > 0 {
			return nil
		}
	}
}

// exitCode is the status a shell reports for a wait status, as `runsc wait` prints it.
func exitCode(status unix.WaitStatus) int {
	if status.Signaled() {
		return 128 + int(status.Signal())
	}
	return status.ExitStatus()
}
