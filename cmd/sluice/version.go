package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newVersion(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print sluice's version, the commit it was built from, and the Go version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintln(g.stdout, versionLine())
			return nil
		},
	}
}

// versionLine describes the build from its build info: the module's
// version (go install ...@v1.2.3) or "(devel)", the commit and its time,
// "+dirty" when built from a modified tree.
func versionLine() string {
	version, commit, at, dirty := "(devel)", "unknown", "", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
				if len(commit) > 12 {
					commit = commit[:12]
				}
			case "vcs.time":
				at = " " + s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
	}
	return fmt.Sprintf("sluice %s (commit %s%s%s, %s %s/%s)", version, commit, dirty, at, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
