// Added to gVisor's runsc/specutils/seccomp by openblox's cluster/build.sh, for the shim
// only (runsc itself is built from the unchanged module); docs/adr/0013 says why.

package seccomp

import "fmt"

// lookupSyscallNo replaces the one function of this package that needs the Sentry's
// syscall tables. The shim imports runsc/specutils, which imports this package for the
// lists of seccomp actions, operators and flags it reports to containerd; it never
// builds a seccomp program. Without the tables the shim no longer links in, and runs
// the initialisation of, the Sentry's kernel packages: about 1 MiB of heap per shim.
func lookupSyscallNo(_ uint32, name string) (uint32, error) {
	return 0, fmt.Errorf("syscall %q: the shim has no syscall table and builds no seccomp program", name)
}
