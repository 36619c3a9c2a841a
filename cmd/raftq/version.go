package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// version is the release this binary was built as. The Makefile sets it
// with -ldflags "-X main.version=..." (git describe); a plain go build
// leaves it empty and the module version Go stamps is used instead.
// commit is the Makefile's `git rev-parse HEAD`, used when the go command
// stamped no VCS information (GOFLAGS=-buildvcs=false, a git worktree).
// Both are written only by the linker.
var version, commit string

// buildInfo is what `raftq version` prints and each node advertises.
type buildInfo struct {
	version, commit, goVersion string
	modified                   bool
}

// readBuildInfo reads the version set at link time and the VCS settings
// the go command stamps into the binary.
func readBuildInfo() buildInfo {
	info := buildInfo{version: version, commit: commit, goVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if info.version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.commit = s.Value // what was built, over what make saw
			case "vcs.modified":
				info.modified = s.Value == "true"
			}
		}
	}
	if info.version == "" {
		info.version = "dev"
	}
	return info
}

// describe is the one-line form nodes advertise: the version, and the
// commit when the version does not already name it.
func (b buildInfo) describe() string {
	short := b.commit
	if len(short) > 12 {
		short = short[:12]
	}
	if short == "" || strings.Contains(b.version, short[:min(7, len(short))]) {
		return b.version
	}
	if b.modified {
		short += "-dirty"
	}
	return b.version + " (" + short + ")"
}

func (b buildInfo) text() string {
	commit := b.commit
	if commit == "" {
		commit = "unknown (built without VCS information)"
	} else if b.modified {
		commit += " (with uncommitted changes)"
	}
	return fmt.Sprintf("raftq %s\ncommit: %s\ngo: %s\n", b.version, commit, b.goVersion)
}

func (b buildInfo) proto() *raftqv1.BuildInfo {
	return &raftqv1.BuildInfo{Version: b.version, Commit: b.commit, Modified: b.modified, GoVersion: b.goVersion}
}

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print raftq's version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			b := readBuildInfo()
			if a.json {
				return printJSON(a.out, b.proto())
			}
			_, err := fmt.Fprint(a.out, b.text())
			return err
		},
	}
}
