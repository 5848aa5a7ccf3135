package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newValidate(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "validate",
		Short: "Check the spec offline; list every problem with its line; exit 2 if invalid",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := g.loadSpec()
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "%s: pipeline %s is valid: %d table(s), %d flow(s)\n", g.specPath, p.Pipeline, len(p.Tables), len(p.Flows))
			return nil
		},
	}
}
