// Added to gVisor's shim (package pkg/shim/v1/runsc) by openblox's cluster/build.sh;
// docs/adr/0013-the-pause-container-runs-from-an-erofs-image.md says why.

package runsc

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/specutils"
)

// Where the node keeps the pause image and the listing of the files it was made from
// (cluster/pause_erofs.py), and the index of its containers' images
// (cluster/rootfs_erofs.py): the directories the shim reads its config from.
var nodeImageDirs = []string{"/run/containerd/runsc", "/etc/containerd/runsc"}

const (
	pauseImageName = "pause.erofs"
	pauseFilesName = "pause.erofs.files"

	criContainerType = "io.kubernetes.cri.container-type"
	criSandbox       = "sandbox"
	rootfsHintPrefix = "dev.gvisor.spec.rootfs."
	resolvConf       = "/etc/resolv.conf"

	// A pause rootfs is one small static binary. A tree larger than this is not one and
	// is not read further.
	maxRootfsEntries = 64
	maxRootfsBytes   = 16 << 20
)

// servePauseFromImage points runsc at the node's EROFS image of the pause rootfs for a
// pod's sandbox container, so that the Sentry mounts the image itself and runsc starts no
// gofer for that container (one host process less per pod, about 5 MiB). It does so only
// when the container's own rootfs is, file for file, the one the image was made from, and
// when nothing else in the spec needs a gofer; it drops the container's /etc/resolv.conf
// bind mount, which the pause process never reads (every other container of the pod keeps
// its own). Otherwise it leaves the spec as containerd wrote it and the pod runs exactly
// as upstream's shim would run it. It returns whether it changed the spec.
func servePauseFromImage(spec *specs.Spec, rootfs string) bool {
	if spec.Annotations[criContainerType] != criSandbox || spec.Root == nil || !spec.Root.Readonly {
		return false
	}
	if hasRootfsHint(spec) {
		return false
	}
	image, listing, ok := findPauseImage()
	if !ok {
		return false
	}
	mounts, err := mountsWithoutGofer(spec.Mounts)
	if err != nil {
		log.L.Warnf("pause container keeps its gofer: %v", err)
		return false
	}
	want, err := os.ReadFile(listing)
	if err != nil {
		log.L.Warnf("pause container keeps its gofer: %v", err)
		return false
	}
	got, err := describeRootfs(rootfs)
	if err != nil {
		log.L.Warnf("pause container keeps its gofer: %v", err)
		return false
	}
	if got != string(want) {
		log.L.Warnf("pause container keeps its gofer: its rootfs is not the one %s was made from:\n%s", image, got)
		return false
	}
	useRootfsImage(spec, mounts, image, "pause container")
	return true
}

// hasRootfsHint tells whether the pod chose its own rootfs source.
func hasRootfsHint(spec *specs.Spec) bool {
	for key := range spec.Annotations {
		if strings.HasPrefix(key, rootfsHintPrefix) {
			return true
		}
	}
	return false
}

// useRootfsImage has runsc mount image as the container's rootfs, with mounts as its
// other mounts, none of which needs a gofer.
func useRootfsImage(spec *specs.Spec, mounts []specs.Mount, image, container string) {
	spec.Mounts = mounts
	spec.Annotations[rootfsHintPrefix+"source"] = image
	spec.Annotations[rootfsHintPrefix+"type"] = "erofs"
	log.L.Infof("%s's rootfs served from %s, without a gofer", container, image)
}

// findPauseImage returns the image and its listing from the first directory holding both.
func findPauseImage() (image, listing string, ok bool) {
	for _, dir := range nodeImageDirs {
		image, listing = filepath.Join(dir, pauseImageName), filepath.Join(dir, pauseFilesName)
		if isRegular(image) && isRegular(listing) {
			return image, listing, true
		}
	}
	return "", "", false
}

func isRegular(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular()
}

// mountsWithoutGofer returns mounts less the /etc/resolv.conf bind, or an error when
// another mount would still need a gofer.
func mountsWithoutGofer(mounts []specs.Mount) ([]specs.Mount, error) {
	kept := make([]specs.Mount, 0, len(mounts))
	for _, m := range mounts {
		if !specutils.HasMountConfig(m) {
			kept = append(kept, m)
			continue
		}
		if m.Destination != resolvConf {
			return nil, fmt.Errorf("mount %s (%s) needs a gofer", m.Destination, m.Type)
		}
	}
	return kept, nil
}

// describeRootfs lists the regular files and symbolic links under root, one a line,
// sorted: "PATH file MODE UID GID SHA256" or "PATH link TARGET", PATH absolute within the
// rootfs and MODE four octal digits. Directories are not listed: the image adds the mount
// points the spec needs. cluster/pause_erofs.py writes the same listing for the image.
func describeRootfs(root string) (string, error) {
	var lines []string
	entries, total := 0, int64(0)
	err := filepath.WalkDir(root, func(path string, entry fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == root {
			return nil
		}
		if entries++; entries > maxRootfsEntries {
			return fmt.Errorf("more than %d entries", maxRootfsEntries)
		}
		rel := "/" + filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
		if strings.ContainsAny(rel, " \t\n") {
			return fmt.Errorf("path %q has white space", rel)
		}
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		owner, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no owner", rel)
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			return nil
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			lines = append(lines, fmt.Sprintf("%s link %s", rel, target))
		case mode.IsRegular():
			if total += info.Size(); total > maxRootfsBytes {
				return fmt.Errorf("more than %d bytes", maxRootfsBytes)
			}
			digest, err := fileDigest(path)
			if err != nil {
				return err
			}
			lines = append(lines, fmt.Sprintf("%s file %04o %d %d %s", rel, owner.Mode&0o7777, owner.Uid, owner.Gid, digest))
		default:
			return fmt.Errorf("%s is a %s, not a file, link or directory", rel, mode.Type())
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("reading rootfs %s: %w", root, err)
	}
	if len(lines) == 0 {
		return "", errors.New("rootfs has no files")
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n", nil
}

func fileDigest(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	hash := sha256.New()
	if _, err := io.Copy(hash, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(hash.Sum(nil)), nil
}
