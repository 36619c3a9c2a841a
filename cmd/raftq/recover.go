package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/cluster"
)

// newRecoverCmd is `raftq cluster recover`: offline, on a stopped node,
// the way out of a lost quorum (docs/operations.md, "Recovering from a
// lost quorum").
func newRecoverCmd(a *app) *cobra.Command {
	var (
		dataDir string
		voters  []string
		dryRun  bool
		force   bool
	)
	cmd := &cobra.Command{
		Use:   "recover --data-dir DIR --voters ID[,ID...]",
		Short: "Rewrite a stopped node's Raft configuration after a lost quorum (offline)",
		Long: "Rewrite the Raft configuration of the stopped node whose data dir is --data-dir\n" +
			"so that only --voters remain (hashicorp/raft's RecoverCluster): the way out of a\n" +
			"cluster that lost a majority of its voters for good. Every entry the node holds\n" +
			"becomes committed; entries only the lost nodes held are gone, acknowledged ones\n" +
			"included. Refused while a node runs on the data dir. --dry-run shows what it\n" +
			"would do (and the node's last index, to pick the most up-to-date survivor).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return errors.New("--data-dir is required: the stopped node's data dir")
			}
			var ids []string
			for _, v := range voters {
				if v = strings.TrimSpace(v); v != "" {
					ids = append(ids, v)
				}
			}
			if len(ids) == 0 {
				return errors.New("--voters is required: the node ids of the new configuration, this node's among them")
			}
			log := slog.New(slog.NewTextHandler(a.errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
			cfg := cluster.RecoverConfig{DataDir: dataDir, Voters: ids, DryRun: true, Logger: log}
			rep, err := broker.Recover(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.errOut, cluster.RecoverWarning(rep))
			if dryRun {
				_, err := fmt.Fprintf(a.out, "dry run: node %s holds entries up to index %d (term %d); nothing changed\n", rep.NodeID, rep.LastIndex, rep.LastTerm)
				return err
			}
			if err := a.confirm(force, "recover the node", "Rewrite the configuration?"); err != nil {
				return err
			}
			cfg.DryRun = false
			if rep, err = broker.Recover(cfg); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.out, "recovered node %s: its configuration is now %d voter(s) (%s), holding entries up to index %d; start it as before\n",
				rep.NodeID, len(rep.New), strings.Join(ids, ","), rep.LastIndex)
			return err
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the stopped node's data dir")
	cmd.Flags().StringSliceVar(&voters, "voters", nil, "comma-separated node ids of the new configuration (servers of the old one, this node's among them)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show what would be done, change nothing")
	cmd.Flags().BoolVar(&force, "force", false, "do not ask for confirmation (needed without a terminal)")
	return cmd
}
