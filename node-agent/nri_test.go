package main

import (
	"context"
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

func TestTheProcessCapComesFromTheAnnotationAndBadValuesAreRefused(t *testing.T) {
	if got, err := processCap(map[string]string{processesAnnotation: "64"}); err != nil || got != 64 {
		t.Errorf("64: got %d, %v", got, err)
	}
	if got, err := processCap(map[string]string{}); err != nil || got != defaultProcesses {
		t.Errorf("absent: got %d, %v", got, err)
	}
	for _, bad := range []string{"", "0", "-1", "lots", "2097152"} {
		if _, err := processCap(map[string]string{processesAnnotation: bad}); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

func TestASandboxContainerGetsTheRlimitAndOthersAreUntouched(t *testing.T) {
	pod := &api.PodSandbox{
		Labels:      map[string]string{sandboxLabel: "box"},
		Annotations: map[string]string{processesAnnotation: "32"},
	}
	adjust, _, err := plugin{}.CreateContainer(context.Background(), pod, &api.Container{Name: containerName})
	if err != nil {
		t.Fatal(err)
	}
	limits := adjust.GetRlimits()
	if len(limits) != 1 || limits[0].Type != "RLIMIT_NPROC" || limits[0].Hard != 32 || limits[0].Soft != 32 {
		t.Errorf("rlimits: %+v", limits)
	}
	other, _, err := plugin{}.CreateContainer(context.Background(), &api.PodSandbox{}, &api.Container{Name: containerName})
	if err != nil || other != nil {
		t.Errorf("an unlabelled pod was adjusted: %+v, %v", other, err)
	}
	pod.Annotations[processesAnnotation] = "many"
	if _, _, err := (plugin{}).CreateContainer(context.Background(), pod, &api.Container{Name: containerName}); err == nil {
		t.Error("a bad annotation did not stop the container")
	}
}

// A warm pool pod carries the label with no value until a Sandbox claims it, and is handed
// out as it started: it gets everything a cold one gets.
func TestAWarmPoolPodIsAdjustedLikeAColdOne(t *testing.T) {
	pod := &api.PodSandbox{
		Labels:      map[string]string{sandboxLabel: ""},
		Annotations: map[string]string{processesAnnotation: "64"},
	}
	mounts := []*api.Mount{{Destination: "/tmp", Type: "bind", Source: "/x", Options: []string{"rbind", "rw"}}}
	adjust, _, err := plugin{}.CreateContainer(context.Background(), pod, &api.Container{Name: containerName, Mounts: mounts})
	if err != nil || adjust == nil {
		t.Fatalf("a pool pod was not adjusted: %+v, %v", adjust, err)
	}
	if limits := adjust.GetRlimits(); len(limits) != 1 || limits[0].Hard != 64 {
		t.Errorf("rlimits: %+v", limits)
	}
	found := false
	for _, m := range adjust.GetMounts() {
		if m.Destination == "/tmp" {
			found = slices.Contains(m.Options, "noexec")
		}
	}
	if !found {
		t.Errorf("the pool pod's /tmp is not noexec: %+v", adjust.GetMounts())
	}
}
