// Run by openblox's cluster/build.sh before it builds the shim.

package runsc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/pkg/shim/v1/proc"
)

// containerNode is a node as cluster/rootfs_erofs.py leaves it: a snapshot directory, an
// image made of it, an index naming both, and a container's rootfs (the same tree) with
// the mount points the spec needs. Directories named in memory stand in for tmpfs mounts.
type containerNode struct {
	lower, upper, image, rootfs, volumes string
	inMemory                             map[string]uint64
}

func newContainerNode(t *testing.T) *containerNode {
	t.Helper()
	dir := t.TempDir()
	n := &containerNode{
		lower:    filepath.Join(dir, "snapshots", "2", "fs"),
		upper:    filepath.Join(dir, "snapshots", "9", "fs"),
		image:    filepath.Join(dir, "images", "2.erofs"),
		rootfs:   filepath.Join(dir, "bundle", "rootfs"),
		volumes:  filepath.Join(dir, "pods", "uid", "volumes", "kubernetes.io~empty-dir"),
		inMemory: map[string]uint64{},
	}
	for _, d := range []string{n.lower, n.upper, filepath.Dir(n.image), n.volumes, filepath.Join(dir, "config")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	for _, d := range []string{"dev", "proc", "tmp", "workspace", "etc"} {
		must(t, os.MkdirAll(filepath.Join(n.rootfs, d), 0o755))
	}
	must(t, os.WriteFile(n.image, []byte("erofs"), 0o644))
	index := fmt.Sprintf("/snapshots/other/fs\t/images/other.erofs\n%s\t%s\n", n.lower, n.image)
	must(t, os.WriteFile(filepath.Join(dir, "config", rootfsIndexName), []byte(index), 0o644))
	savedDirs, savedSize := nodeImageDirs, inMemorySize
	nodeImageDirs = []string{filepath.Join(dir, "absent"), filepath.Join(dir, "config")}
	inMemorySize = func(path string) (uint64, error) {
		if size, ok := n.inMemory[path]; ok {
			return size, nil
		}
		return 0, errors.New("not in memory")
	}
	t.Cleanup(func() { nodeImageDirs, inMemorySize = savedDirs, savedSize })
	return n
}

func (n *containerNode) emptyDir(t *testing.T, name string, size uint64) string {
	t.Helper()
	path := filepath.Join(n.volumes, name)
	must(t, os.Mkdir(path, 0o777))
	must(t, os.Chmod(path, 0o777|os.ModeSticky))
	n.inMemory[path] = size
	return path
}

func (n *containerNode) rootfsMounts() []proc.Mount {
	return []proc.Mount{{Type: "overlay", Source: "overlay", Options: []string{
		"index=off", lowerdirOption + n.lower, upperdirOption + n.upper, "workdir=/w"}}}
}

func (n *containerNode) spec(t *testing.T) *specs.Spec {
	t.Helper()
	return &specs.Spec{
		Root:        &specs.Root{Path: "rootfs", Readonly: true},
		Annotations: map[string]string{criContainerType: criContainer},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts"},
			{Destination: "/tmp", Type: "bind", Source: n.emptyDir(t, "tmp", 128<<20),
				Options: []string{"rbind", "rprivate", "rw", "noexec", "nosuid", "nodev"}},
			{Destination: "/workspace", Type: "bind", Source: n.emptyDir(t, "workspace", 64<<20),
				Options: []string{"rbind", "rprivate", "rw"}},
			{Destination: "/dev/termination-log", Type: "bind", Source: "/k/termination", Options: []string{"rbind"}},
			{Destination: "/etc/hostname", Type: "bind", Source: "/c/hostname", Options: []string{"rbind", "ro"}},
			{Destination: "/etc/hosts", Type: "bind", Source: "/k/etc-hosts", Options: []string{"rbind"}},
			{Destination: "/etc/resolv.conf", Type: "bind", Source: "/c/resolv.conf", Options: []string{"rbind", "ro"}},
		},
	}
}

func TestASandboxContainerIsServedFromItsSnapshotsImageWithItsVolumesInTheSandbox(t *testing.T) {
	n := newContainerNode(t)
	spec := n.spec(t)
	if !serveContainerFromImage(spec, n.rootfsMounts(), n.rootfs) {
		t.Fatal("spec not changed")
	}
	if got := spec.Annotations[rootfsHintPrefix+"source"]; got != n.image {
		t.Fatalf("rootfs source %q, want %q", got, n.image)
	}
	if got := spec.Annotations[rootfsHintPrefix+"type"]; got != "erofs" {
		t.Fatalf("rootfs type %q", got)
	}
	uid, gid := owner(t, filepath.Join(n.volumes, "tmp"))
	want := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts"},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{
			"size=134217728", "mode=1777", fmt.Sprintf("uid=%d", uid), fmt.Sprintf("gid=%d", gid),
			"rw", "noexec", "nosuid", "nodev"}},
		{Destination: "/workspace", Type: "tmpfs", Source: "tmpfs", Options: []string{
			"size=67108864", "mode=1777", fmt.Sprintf("uid=%d", uid), fmt.Sprintf("gid=%d", gid), "rw"}},
	}
	if !reflect.DeepEqual(spec.Mounts, want) {
		t.Fatalf("mounts\n%+v\nwant\n%+v", spec.Mounts, want)
	}
}

func TestABindRootfsOfTheSnapshotIsServedToo(t *testing.T) {
	n := newContainerNode(t)
	spec := n.spec(t)
	if !serveContainerFromImage(spec, []proc.Mount{{Type: "bind", Source: n.lower, Options: []string{"ro", "rbind"}}}, n.rootfs) {
		t.Fatal("spec not changed")
	}
}

func TestAnyOtherContainerKeepsItsGoferAndItsSpec(t *testing.T) {
	for name, change := range map[string]func(t *testing.T, n *containerNode, spec *specs.Spec, rootfs *[]proc.Mount){
		"a pause container": func(_ *testing.T, _ *containerNode, spec *specs.Spec, _ *[]proc.Mount) {
			spec.Annotations[criContainerType] = criSandbox
		},
		"no container type": func(_ *testing.T, _ *containerNode, spec *specs.Spec, _ *[]proc.Mount) {
			delete(spec.Annotations, criContainerType)
		},
		"a writable root": func(_ *testing.T, _ *containerNode, spec *specs.Spec, _ *[]proc.Mount) { spec.Root.Readonly = false },
		"its own rootfs hint": func(_ *testing.T, _ *containerNode, spec *specs.Spec, _ *[]proc.Mount) {
			spec.Annotations[rootfsHintPrefix+"overlay"] = "memory"
		},
		"another image's snapshot": func(_ *testing.T, n *containerNode, _ *specs.Spec, rootfs *[]proc.Mount) {
			(*rootfs)[0].Options[1] = lowerdirOption + filepath.Join(filepath.Dir(n.lower), "..", "3", "fs")
		},
		"a snapshot stacked on the image's": func(_ *testing.T, n *containerNode, _ *specs.Spec, rootfs *[]proc.Mount) {
			(*rootfs)[0].Options[1] = lowerdirOption + "/snapshots/5/fs:" + n.lower
		},
		"files written over the image": func(t *testing.T, n *containerNode, _ *specs.Spec, _ *[]proc.Mount) {
			must(t, os.WriteFile(filepath.Join(n.upper, "planted"), nil, 0o644))
		},
		"two rootfs mounts": func(_ *testing.T, _ *containerNode, _ *specs.Spec, rootfs *[]proc.Mount) {
			*rootfs = append(*rootfs, (*rootfs)[0])
		},
		"a host path volume": func(_ *testing.T, _ *containerNode, spec *specs.Spec, _ *[]proc.Mount) {
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/data", Type: "bind", Source: "/srv", Options: []string{"rbind"}})
		},
		"an emptyDir on disk": func(t *testing.T, n *containerNode, spec *specs.Spec, _ *[]proc.Mount) {
			delete(n.inMemory, spec.Mounts[4].Source)
		},
		"a mount point the image lacks": func(t *testing.T, n *containerNode, _ *specs.Spec, _ *[]proc.Mount) {
			must(t, os.Remove(filepath.Join(n.rootfs, "workspace")))
		},
		"a mount point that is a symbolic link": func(t *testing.T, n *containerNode, _ *specs.Spec, _ *[]proc.Mount) {
			must(t, os.Remove(filepath.Join(n.rootfs, "tmp")))
			must(t, os.Symlink("workspace", filepath.Join(n.rootfs, "tmp")))
		},
		"a malformed index": func(t *testing.T, _ *containerNode, _ *specs.Spec, _ *[]proc.Mount) {
			must(t, os.WriteFile(filepath.Join(nodeImageDirs[1], rootfsIndexName), []byte("relative\t/x\n"), 0o644))
		},
		"an image gone from the node": func(t *testing.T, n *containerNode, _ *specs.Spec, _ *[]proc.Mount) {
			must(t, os.Remove(n.image))
		},
	} {
		t.Run(name, func(t *testing.T) {
			n := newContainerNode(t)
			spec := n.spec(t)
			rootfs := n.rootfsMounts()
			change(t, n, spec, &rootfs)
			before := cloneSpec(t, spec)
			if serveContainerFromImage(spec, rootfs, n.rootfs) {
				t.Fatal("spec changed")
			}
			if !reflect.DeepEqual(spec, before) {
				t.Fatalf("spec modified although not served from the image:\n%+v\nwas\n%+v", spec, before)
			}
		})
	}
}
