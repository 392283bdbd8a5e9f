// Added to gVisor's shim (package pkg/shim/v1/runsc) by openblox's cluster/build.sh;
// docs/adr/0014-sandbox-containers-run-without-a-gofer.md says why.

package runsc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/pkg/shim/v1/proc"
	"gvisor.dev/gvisor/runsc/specutils"
)

const (
	// One line per image: the snapshot directory containerd unpacked it into (what a
	// container's rootfs mount names as its lower layer), a tab, the EROFS image made from
	// that directory. cluster/rootfs_erofs.py writes it.
	rootfsIndexName = "rootfs-images"
	criContainer    = "container"
	emptyDirVolumes = "/volumes/kubernetes.io~empty-dir/"
	tmpfsMagic      = 0x01021994
	maxIndexBytes   = 1 << 20
	lowerdirOption  = "lowerdir="
	upperdirOption  = "upperdir="
)

// The files the kubelet and containerd bind into every container. An EROFS-served
// container reads its image's copies instead: with no network, /etc/hosts and
// /etc/resolv.conf name nothing it can reach, the UTS hostname comes from the spec, and
// the kubelet falls back to the container's log for a termination message.
var replaceableBinds = map[string]bool{
	"/etc/hostname":        true,
	"/etc/hosts":           true,
	"/etc/resolv.conf":     true,
	"/dev/termination-log": true,
}

// serveContainerFromImage points runsc at the node's EROFS image of a container's
// rootfs, and turns the container's in-memory emptyDir volumes into tmpfs mounts of the
// same size inside the sandbox, so that runsc starts no gofer for it. It does so only
// when the rootfs is read-only and is exactly a snapshot the node made an image of, and
// when every other mount is one the Sentry serves itself, one of the binds above, or an
// in-memory emptyDir. Otherwise it leaves the spec as containerd wrote it and the
// container runs as upstream's shim would run it. It returns whether it changed the spec.
func serveContainerFromImage(spec *specs.Spec, rootfsMounts []proc.Mount, rootfs string) bool {
	if spec.Annotations[criContainerType] != criContainer || spec.Root == nil || !spec.Root.Readonly {
		return false
	}
	if hasRootfsHint(spec) {
		return false
	}
	lower, err := snapshotLower(rootfsMounts)
	if err != nil {
		log.L.Debugf("container keeps its gofer: %v", err)
		return false
	}
	image, ok := imageOfSnapshot(lower)
	if !ok {
		return false
	}
	mounts, err := sandboxMounts(spec.Mounts, rootfs)
	if err != nil {
		log.L.Warnf("container keeps its gofer: %v", err)
		return false
	}
	useRootfsImage(spec, mounts, image, "container")
	return true
}

// snapshotLower returns the one committed snapshot a container's rootfs is made of: the
// lower directory of an overlay whose upper layer is still empty, or a read-only bind's
// source.
func snapshotLower(mounts []proc.Mount) (string, error) {
	if len(mounts) != 1 {
		return "", fmt.Errorf("rootfs has %d mounts, not one", len(mounts))
	}
	m := mounts[0]
	switch m.Type {
	case "bind":
		return m.Source, nil
	case "overlay":
		var lower, upper string
		for _, option := range m.Options {
			if strings.HasPrefix(option, lowerdirOption) {
				lower = strings.TrimPrefix(option, lowerdirOption)
			} else if strings.HasPrefix(option, upperdirOption) {
				upper = strings.TrimPrefix(option, upperdirOption)
			}
		}
		if lower == "" {
			return "", errors.New("overlay rootfs has no lower directory")
		}
		if upper != "" {
			empty, err := isEmptyDir(upper)
			if err != nil || !empty {
				return "", fmt.Errorf("overlay rootfs's upper directory %s is not empty (%v)", upper, err)
			}
		}
		return lower, nil
	}
	return "", fmt.Errorf("rootfs is a %s mount", m.Type)
}

func isEmptyDir(path string) (bool, error) {
	dir, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer dir.Close()
	if _, err := dir.Readdirnames(1); err == io.EOF {
		return true, nil
	} else if err != nil {
		return false, err
	}
	return false, nil
}

// imageOfSnapshot looks lower up in the first index of nodeImageDirs that has it.
func imageOfSnapshot(lower string) (string, bool) {
	for _, dir := range nodeImageDirs {
		image, err := lookupIndex(filepath.Join(dir, rootfsIndexName), lower)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				log.L.Warnf("container keeps its gofer: %v", err)
			}
			continue
		}
		if image != "" && isRegular(image) {
			return image, true
		}
	}
	return "", false
}

func lookupIndex(index, lower string) (string, error) {
	f, err := os.Open(index)
	if err != nil {
		return "", err
	}
	defer f.Close()
	lines := bufio.NewScanner(io.LimitReader(f, maxIndexBytes))
	for lines.Scan() {
		snapshot, image, ok := strings.Cut(lines.Text(), "\t")
		if !ok || !filepath.IsAbs(snapshot) || !filepath.IsAbs(image) {
			return "", fmt.Errorf("%s: malformed line %q", index, lines.Text())
		}
		if snapshot == lower {
			return image, nil
		}
	}
	return "", lines.Err()
}

// sandboxMounts returns the container's mounts with the replaceable binds dropped and
// each in-memory emptyDir as a tmpfs of its size, mode and owner, or an error when a
// mount would still need a gofer or a mount point is not a directory of the image.
func sandboxMounts(mounts []specs.Mount, rootfs string) ([]specs.Mount, error) {
	kept := make([]specs.Mount, 0, len(mounts))
	for _, m := range mounts {
		switch {
		case !specutils.HasMountConfig(m):
			kept = append(kept, m)
		case m.Type == "bind" && replaceableBinds[m.Destination]:
		case m.Type == "bind" && strings.Contains(m.Source, emptyDirVolumes):
			tmpfs, err := emptyDirAsTmpfs(m)
			if err != nil {
				return nil, err
			}
			kept = append(kept, tmpfs)
		default:
			return nil, fmt.Errorf("mount %s (%s from %s) needs a gofer", m.Destination, m.Type, m.Source)
		}
	}
	for _, m := range kept {
		if err := mountPointInImage(kept, m.Destination, rootfs); err != nil {
			return nil, err
		}
	}
	return kept, nil
}

// emptyDirAsTmpfs is the tmpfs the Sentry mounts in place of a kubelet's in-memory
// emptyDir, with the same size, mode, owner and flags.
func emptyDirAsTmpfs(m specs.Mount) (specs.Mount, error) {
	size, err := inMemorySize(m.Source)
	if err != nil {
		return specs.Mount{}, err
	}
	var dir syscall.Stat_t
	if err := syscall.Lstat(m.Source, &dir); err != nil {
		return specs.Mount{}, err
	}
	options := []string{
		fmt.Sprintf("size=%d", size),
		fmt.Sprintf("mode=%04o", dir.Mode&0o7777),
		fmt.Sprintf("uid=%d", dir.Uid),
		fmt.Sprintf("gid=%d", dir.Gid),
	}
	for _, option := range m.Options {
		switch option {
		case "ro", "rw", "noexec", "nosuid", "nodev":
			options = append(options, option)
		}
	}
	return specs.Mount{Destination: m.Destination, Type: "tmpfs", Source: "tmpfs", Options: options}, nil
}

// inMemorySize is the size of the tmpfs the kubelet mounted for an in-memory emptyDir
// (one per volume, sized by its sizeLimit), or an error for a directory that is not the
// root of a tmpfs of its own. Tests replace it.
var inMemorySize = func(path string) (uint64, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(path, &fs); err != nil {
		return 0, err
	}
	var dir, parent syscall.Stat_t
	if err := syscall.Lstat(path, &dir); err != nil {
		return 0, err
	}
	if err := syscall.Lstat(filepath.Dir(path), &parent); err != nil {
		return 0, err
	}
	if fs.Type != tmpfsMagic || dir.Mode&syscall.S_IFMT != syscall.S_IFDIR || dir.Dev == parent.Dev {
		return 0, fmt.Errorf("emptyDir %s is not a tmpfs of its own", path)
	}
	return uint64(fs.Blocks) * uint64(fs.Bsize), nil
}

// mountPointInImage checks that a mount point the Sentry must find in the read-only
// image is a directory there (the container's rootfs is the same tree); one below
// another mount is that mount's to provide. Symbolic links are not followed.
func mountPointInImage(mounts []specs.Mount, destination, rootfs string) error {
	clean := filepath.Clean(destination)
	for _, other := range mounts {
		parent := filepath.Clean(other.Destination)
		if parent != clean && strings.HasPrefix(clean, strings.TrimSuffix(parent, "/")+"/") {
			return nil
		}
	}
	path := rootfs
	for _, part := range strings.Split(strings.TrimPrefix(clean, "/"), "/") {
		path = filepath.Join(path, part)
		info, err := os.Lstat(path)
		if err != nil || !info.IsDir() {
			return fmt.Errorf("mount point %s is not a directory of the image", destination)
		}
	}
	return nil
}
