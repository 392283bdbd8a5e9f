// Run by openblox's cluster/build.sh before it builds the shim.

package runsc

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
)

func TestMain(m *testing.M) {
	logrus.SetOutput(io.Discard) // the shim's log lines, which these tests provoke
	os.Exit(m.Run())
}

// The listing tests/unit/test_pause_erofs.py expects from cluster/pause_erofs.py for the
// same tree, so the two sides agree.
const pauseBinary = "pause binary\n"
const pauseDigest = "ebec7482eaa97e60aa17563bf57bcda4897c97d38f22df4f43425f5208e03a61"

func writeTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "etc", "empty"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "pause"), []byte(pauseBinary), 0o755))
	must(t, os.Chmod(filepath.Join(root, "pause"), 0o755|os.ModeSetuid))
	must(t, os.WriteFile(filepath.Join(root, "etc", "motd"), nil, 0o600))
	must(t, os.Symlink("../pause", filepath.Join(root, "etc", "link")))
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func owner(t *testing.T, path string) (uint32, uint32) {
	t.Helper()
	info, err := os.Lstat(path)
	must(t, err)
	st := info.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

func TestDescribeRootfsListsFilesAndLinksSortedWithoutDirectories(t *testing.T) {
	root := writeTree(t)
	uid, gid := owner(t, filepath.Join(root, "pause"))
	got, err := describeRootfs(root)
	must(t, err)
	want := fmt.Sprintf("/etc/link link ../pause\n"+
		"/etc/motd file 0600 %d %d e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"+
		"/pause file 4755 %d %d %s\n", uid, gid, uid, gid, pauseDigest)
	if got != want {
		t.Fatalf("listing:\n%s\nwant:\n%s", got, want)
	}
}

func TestDescribeRootfsRefusesWhatIsNotAPauseRootfs(t *testing.T) {
	for name, prepare := range map[string]func(root string) error{
		"fifo":        func(root string) error { return syscall.Mkfifo(filepath.Join(root, "fifo"), 0o600) },
		"white space": func(root string) error { return os.WriteFile(filepath.Join(root, "a b"), nil, 0o644) },
		"too many entries": func(root string) error {
			for i := 0; i <= maxRootfsEntries; i++ {
				if err := os.WriteFile(filepath.Join(root, fmt.Sprint(i)), nil, 0o644); err != nil {
					return err
				}
			}
			return nil
		},
		"too large": func(root string) error {
			return os.WriteFile(filepath.Join(root, "big"), make([]byte, maxRootfsBytes+1), 0o644)
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			must(t, prepare(root))
			if got, err := describeRootfs(root); err == nil {
				t.Fatalf("no error; listing:\n%s", got)
			}
		})
	}
	if got, err := describeRootfs(t.TempDir()); err == nil {
		t.Fatalf("an empty rootfs gave no error; listing %q", got)
	}
}

func pauseSpec(source string) *specs.Spec {
	return &specs.Spec{
		Root: &specs.Root{Path: "rootfs", Readonly: true},
		Annotations: map[string]string{
			criContainerType: criSandbox,
			"dev.gvisor.spec.mount.gvisorinternaldevshm.type": "tmpfs",
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "/run/shm", Options: []string{"ro"}},
			{Destination: resolvConf, Type: "bind", Source: source, Options: []string{"rbind", "ro"}},
		},
	}
}

// nodeWithImage points the shim at a directory holding an image and the listing of root.
func nodeWithImage(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	listing, err := describeRootfs(root)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, pauseImageName), []byte("erofs"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, pauseFilesName), []byte(listing), 0o644))
	saved := nodeImageDirs
	nodeImageDirs = []string{filepath.Join(dir, "absent"), dir}
	t.Cleanup(func() { nodeImageDirs = saved })
	return dir
}

func TestThePauseContainerIsServedFromTheImageWhenItsRootfsIsTheImages(t *testing.T) {
	root := writeTree(t)
	dir := nodeWithImage(t, root)
	spec := pauseSpec("/var/lib/resolv.conf")
	if !servePauseFromImage(spec, root) {
		t.Fatal("spec not changed")
	}
	if got := spec.Annotations[rootfsHintPrefix+"source"]; got != filepath.Join(dir, pauseImageName) {
		t.Fatalf("rootfs source %q", got)
	}
	if got := spec.Annotations[rootfsHintPrefix+"type"]; got != "erofs" {
		t.Fatalf("rootfs type %q", got)
	}
	var destinations []string
	for _, m := range spec.Mounts {
		destinations = append(destinations, m.Destination)
	}
	if want := []string{"/proc", "/dev/shm"}; !reflect.DeepEqual(destinations, want) {
		t.Fatalf("mounts %v, want %v", destinations, want)
	}
}

func TestEverythingElseKeepsTheSpecAsContainerdWroteIt(t *testing.T) {
	root := writeTree(t)
	for name, change := range map[string]func(spec *specs.Spec, root string){
		"an app container":    func(spec *specs.Spec, _ string) { spec.Annotations[criContainerType] = "container" },
		"no container type":   func(spec *specs.Spec, _ string) { delete(spec.Annotations, criContainerType) },
		"a writable root":     func(spec *specs.Spec, _ string) { spec.Root.Readonly = false },
		"its own rootfs hint": func(spec *specs.Spec, _ string) { spec.Annotations[rootfsHintPrefix+"overlay"] = "memory" },
		"another host bind mount": func(spec *specs.Spec, _ string) {
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/data", Type: "bind", Source: "/srv"})
		},
		"an rbind typed as none": func(spec *specs.Spec, _ string) {
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/data", Type: "none", Source: "/srv", Options: []string{"rbind"}})
		},
		"a changed binary": func(_ *specs.Spec, root string) {
			must(t, os.WriteFile(filepath.Join(root, "pause"), []byte("other\n"), 0o755))
		},
		"an extra file":  func(_ *specs.Spec, root string) { must(t, os.WriteFile(filepath.Join(root, "extra"), nil, 0o644)) },
		"a changed mode": func(_ *specs.Spec, root string) { must(t, os.Chmod(filepath.Join(root, "etc", "motd"), 0o644)) },
	} {
		t.Run(name, func(t *testing.T) {
			root := writeTree(t)
			nodeWithImage(t, root)
			spec := pauseSpec("/var/lib/resolv.conf")
			change(spec, root)
			before := cloneSpec(t, spec)
			if servePauseFromImage(spec, root) {
				t.Fatal("spec changed")
			}
			if !reflect.DeepEqual(spec, before) {
				t.Fatalf("spec modified although not served from the image:\n%+v\nwas\n%+v", spec, before)
			}
		})
	}
	t.Run("no image on the node", func(t *testing.T) {
		saved := nodeImageDirs
		nodeImageDirs = []string{t.TempDir()}
		t.Cleanup(func() { nodeImageDirs = saved })
		if servePauseFromImage(pauseSpec("/r"), root) {
			t.Fatal("spec changed")
		}
	})
}

func cloneSpec(t *testing.T, spec *specs.Spec) *specs.Spec {
	t.Helper()
	clone := *spec
	root := *spec.Root
	clone.Root = &root
	clone.Annotations = map[string]string{}
	for k, v := range spec.Annotations {
		clone.Annotations[k] = v
	}
	clone.Mounts = append([]specs.Mount(nil), spec.Mounts...)
	return &clone
}
