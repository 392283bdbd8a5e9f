package main

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/BurntSushi/toml"
)

// The seccomp profile sandbox pods name (Localhost openblox/sandbox.json): shipped in the
// agent, so the profile on a node is always the one its agent was built with.
//
//go:embed sandbox-seccomp.json
var sandboxSeccomp []byte

const (
	seccompFile     = "sandbox.json"
	runscHandler    = "runsc"
	runscNetworkOff = "none"
)

// A lack is one reason the node may not run sandboxes: a machine-readable reason (the
// Node condition's) and the words an admin acts on.
type lack struct {
	Reason  string
	Message string
}

// installSeccomp writes the shipped profile into dir (the kubelet's seccomp directory's
// openblox/) unless it is there already. replaced says a different file stood there
// (someone changed it); a lack says the profile is not in place.
func installSeccomp(dir string) (replaced bool, problem *lack) {
	path := filepath.Join(dir, seccompFile)
	found, err := os.ReadFile(path)
	existed := err == nil
	switch {
	case err == nil && bytes.Equal(found, sandboxSeccomp):
		return false, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return false, &lack{"SeccompUnreadable", fmt.Sprintf("cannot read %s: %v", path, err)}
	}
	// Written beside it and renamed over it: the kubelet never reads half a profile.
	partial := path + ".partial"
	if err := os.WriteFile(partial, sandboxSeccomp, 0o644); err != nil {
		return false, &lack{"SeccompNotInstalled", fmt.Sprintf("cannot write %s: %v", partial, err)}
	}
	if err := os.Rename(partial, path); err != nil {
		return false, &lack{"SeccompNotInstalled", fmt.Sprintf("cannot install %s: %v", path, err)}
	}
	return existed, nil
}

// runscConfig is the part of gVisor's runsc.toml (the runsc handler's ConfigPath) the
// agent reads.
type runscConfig struct {
	RunscConfig map[string]any `toml:"runsc_config"`
}

// checkRunscConfig reads the runsc handler's options file: gVisor's networking must be
// off (network = "none"), so a sandbox has only loopback whatever the NetworkPolicy is.
func checkRunscConfig(path string) *lack {
	text, err := os.ReadFile(path)
	if err != nil {
		return &lack{"RunscConfigUnreadable", fmt.Sprintf(
			"cannot read the runsc handler's options %s: %v", path, err)}
	}
	var config runscConfig
	if _, err := toml.Decode(string(text), &config); err != nil {
		return &lack{"RunscConfigInvalid", fmt.Sprintf("%s is not valid TOML: %v", path, err)}
	}
	network, _ := config.RunscConfig["network"].(string)
	if network != runscNetworkOff {
		shown := "unset"
		if network != "" {
			shown = fmt.Sprintf("%q", network)
		}
		return &lack{"RunscNetworkOn", fmt.Sprintf(
			"%s sets [runsc_config] network to %s, not %q: gVisor would give sandboxes "+
				"the pod's network", path, shown, runscNetworkOff)}
	}
	return nil
}

// checkHandler reads the runtime handlers the kubelet reports for the node (CRI's).
func checkHandler(handlers []string) *lack {
	if slices.Contains(handlers, runscHandler) {
		return nil
	}
	return &lack{"RunscHandlerMissing", fmt.Sprintf(
		"the node's container runtime reports no %q handler (it reports %q)",
		runscHandler, handlers)}
}
