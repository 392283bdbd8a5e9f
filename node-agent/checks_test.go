package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTheSeccompProfileIsInstalledKeptAndAChangedOneReplaced(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, seccompFile)
	if replaced, problem := installSeccomp(dir); replaced || problem != nil {
		t.Fatalf("first install: replaced=%v problem=%+v", replaced, problem)
	}
	if got, _ := os.ReadFile(path); string(got) != string(sandboxSeccomp) {
		t.Fatal("the installed profile is not the shipped one")
	}
	if replaced, problem := installSeccomp(dir); replaced || problem != nil {
		t.Fatalf("an unchanged profile was rewritten: replaced=%v problem=%+v", replaced, problem)
	}
	if err := os.WriteFile(path, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if replaced, problem := installSeccomp(dir); !replaced || problem != nil {
		t.Fatalf("a changed profile: replaced=%v problem=%+v", replaced, problem)
	}
	if got, _ := os.ReadFile(path); string(got) != string(sandboxSeccomp) {
		t.Fatal("the changed profile was not put back")
	}
}

func TestAProfileThatCannotBeWrittenIsALack(t *testing.T) {
	if os.Geteuid() == 0 {
		// root writes through a 0500 directory; a missing parent stops anyone.
		_, problem := installSeccomp(filepath.Join(t.TempDir(), "missing", "dir"))
		if problem == nil || problem.Reason != "SeccompNotInstalled" {
			t.Fatalf("got %+v", problem)
		}
		return
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	if _, problem := installSeccomp(dir); problem == nil || problem.Reason != "SeccompNotInstalled" {
		t.Fatalf("got %+v", problem)
	}
}

func TestRunscMustTurnGVisorsNetworkingOff(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"none":      "[runsc_config]\n  network = \"none\"\n  platform = \"systrap\"\n",
		"sandbox":   "[runsc_config]\n  network = \"sandbox\"\n",
		"unset":     "binary_name = \"/usr/local/bin/runsc\"\n[runsc_config]\n  platform = \"systrap\"\n",
		"commented": "[runsc_config]\n  # network = \"none\"\n",
		"elsewhere": "network = \"none\"\n[runsc_config]\n",
		"invalid":   "[runsc_config\nnetwork = none\n",
	}
	want := map[string]string{
		"none": "", "sandbox": "RunscNetworkOn", "unset": "RunscNetworkOn",
		"commented": "RunscNetworkOn", "elsewhere": "RunscNetworkOn", "invalid": "RunscConfigInvalid",
	}
	for name, text := range cases {
		path := filepath.Join(dir, name+".toml")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		problem := checkRunscConfig(path)
		got := ""
		if problem != nil {
			got = problem.Reason
			if !strings.Contains(problem.Message, path) {
				t.Errorf("%s: the message does not name the file: %s", name, problem.Message)
			}
		}
		if got != want[name] {
			t.Errorf("%s: got %q, want %q", name, got, want[name])
		}
	}
	if problem := checkRunscConfig(filepath.Join(dir, "absent.toml")); problem == nil || problem.Reason != "RunscConfigUnreadable" {
		t.Errorf("an absent file: %+v", problem)
	}
}

func TestTheRunscHandlerMustBeReported(t *testing.T) {
	if checkHandler([]string{"", "runc", "runsc"}) != nil {
		t.Error("runsc was reported, yet refused")
	}
	problem := checkHandler([]string{"", "runc"})
	if problem == nil || problem.Reason != "RunscHandlerMissing" || !strings.Contains(problem.Message, "runc") {
		t.Errorf("got %+v", problem)
	}
}

func TestTheVerdictNamesEveryLackAndReadyOnlyWithNone(t *testing.T) {
	if v := verdictOf(nil); !v.ready || v.reason != "Prepared" {
		t.Errorf("no lack: %+v", v)
	}
	v := verdictOf([]lack{{"RunscNetworkOn", "a"}, {"NRIPluginNotConnected", "b"}})
	if v.ready || v.reason != "RunscNetworkOn" || v.message != "a; b" {
		t.Errorf("two lacks: %+v", v)
	}
}
