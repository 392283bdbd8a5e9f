package main

import (
	"slices"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

func TestScratchMountsGetNoexecAndShmIsReplaced(t *testing.T) {
	mounts := []*api.Mount{
		{Destination: "/tmp", Type: "bind", Source: "/nonexistent/tmp", Options: []string{"rbind", "rw"}},
		{Destination: "/workspace", Type: "bind", Source: "/x", Options: []string{"rbind", "rw", "nosuid"}},
		{Destination: "/etc/hosts", Type: "bind", Source: "/y", Options: []string{"rbind", "ro"}},
		{Destination: "/dev/shm", Type: "bind", Source: "/z", Options: []string{"rbind", "rw"}},
	}
	adjusted := map[string]*api.Mount{}
	for _, m := range adjustments(mounts).GetMounts() {
		adjusted[m.Destination] = m
	}
	for _, path := range []string{"/tmp", "/workspace"} {
		m := adjusted[path]
		if m == nil {
			t.Fatalf("%s not adjusted", path)
		}
		for _, option := range []string{"noexec", "nosuid", "nodev", "rbind"} {
			if !slices.Contains(m.Options, option) {
				t.Errorf("%s lacks %s: %v", path, option, m.Options)
			}
		}
	}
	if adjusted["/workspace"].Options[2] != "nosuid" || len(adjusted["/workspace"].Options) != 5 {
		t.Errorf("options duplicated or reordered: %v", adjusted["/workspace"].Options)
	}
	if _, touched := adjusted["/etc/hosts"]; touched {
		t.Error("a mount outside the scratch set was changed")
	}
	shm := adjusted["/dev/shm"]
	if shm == nil || shm.Type != "tmpfs" || !slices.Contains(shm.Options, "size=67108864") ||
		!slices.Contains(shm.Options, "noexec") {
		t.Errorf("/dev/shm not replaced by a 64 MiB noexec tmpfs: %+v", shm)
	}
}
