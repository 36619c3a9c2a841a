package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func newAuthCmd(a *app) *cobra.Command {
	cmd := group("auth", "Manage identities, tokens and permissions (needs the admin role)")
	cmd.AddCommand(newTokenCmd(a), newGrantCmd(a), newUngrantCmd(a), newAuthListCmd(a), newWhoAmICmd(a))
	return cmd
}

func newTokenCmd(a *app) *cobra.Command {
	cmd := group("token", "Create and revoke bearer tokens")
	var (
		expires  time.Duration
		identity string
		out      string
		force    bool
	)
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a token and print it, alone on stdout (it is shown only this once)",
		Long: "Create a bearer token named NAME for the identity NAME (or --identity) and\n" +
			"print it alone on stdout, or as {\"name\":...,\"token\":...} with --json. The\n" +
			"cluster keeps only its SHA-256: it cannot be shown again. To rotate, create\n" +
			"a second token for the same --identity, switch clients to it, revoke the first.",
		Args: cobra.ExactArgs(1),
		RunE: a.unary(func(ctx context.Context, c *client.Client, args []string) error {
			if out != "" {
				// Before the token is made: it cannot be shown again.
				if err := checkSecretOut(out, force); err != nil {
					return err
				}
			}
			t, err := c.CreateToken(ctx, args[0], identity, expires)
			if err != nil {
				return err
			}
			a.settleAuth(ctx, c)
			if out != "" {
				if err := writeSecret(out, []byte(t.Token+"\n"), force); err != nil {
					return fmt.Errorf("token %s was made but not saved (revoke it: raftq auth token revoke %s): %w", args[0], args[0], err)
				}
				_, err = fmt.Fprintf(a.out, "wrote the token %s to %s (mode 0600)\n", args[0], out)
				return err
			}
			if a.json {
				return printJSON(a.out, t)
			}
			_, err = fmt.Fprintln(a.out, t.Token)
			return err
		}),
	}
	create.Flags().DurationVar(&expires, "expires", 0, "lifetime, e.g. 720h (default: never expires)")
	create.Flags().StringVar(&identity, "identity", "", "identity the token authenticates as (default: NAME)")
	create.Flags().StringVar(&out, "out", "", "write the token to this file, mode 0600 (for --token-file), instead of printing it")
	create.Flags().BoolVar(&force, "force", false, "with --out: replace an existing file")
	revoke := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke the token named NAME (refused from then on, on every node)",
		Args:  cobra.ExactArgs(1),
		RunE: a.unary(func(ctx context.Context, c *client.Client, args []string) error {
			if err := c.RevokeToken(ctx, args[0]); err != nil {
				return err
			}
			a.settleAuth(ctx, c)
			if a.json {
				return printJSON(a.out, &raftqv1.RevokeTokenResponse{})
			}
			_, err := fmt.Fprintf(a.out, "revoked token %s\n", args[0])
			return err
		}),
	}
	cmd.AddCommand(create, revoke)
	return cmd
}

func newGrantCmd(a *app) *cobra.Command {
	var (
		pattern string
		allow   []string
		admin   bool
	)
	cmd := &cobra.Command{
		Use:   "grant NAME (--queue PATTERN --allow PERMS | --admin)",
		Short: "Give an identity permissions on queues matching a pattern, or the admin role",
		Long: "Give identity NAME the permissions --allow (any of produce, consume, browse,\n" +
			"manage) on queues whose name matches --queue, where * matches any run of\n" +
			"characters, dots included ('jobs.*' covers jobs.a and jobs.a.dlq). Grants on\n" +
			"one pattern add up. --admin gives the admin role instead: every permission on\n" +
			"every queue, cluster operations and auth changes.",
		Args: cobra.ExactArgs(1),
		RunE: a.unary(func(ctx context.Context, c *client.Client, args []string) error {
			var err error
			switch {
			case admin && (pattern != "" || len(allow) > 0):
				return fmt.Errorf("--admin takes no --queue or --allow")
			case admin:
				err = c.GrantAdmin(ctx, args[0])
			case pattern == "" || len(allow) == 0:
				return fmt.Errorf("give --queue PATTERN and --allow PERMS, or --admin")
			default:
				err = c.Grant(ctx, args[0], pattern, allow...)
			}
			if err != nil {
				return err
			}
			a.settleAuth(ctx, c)
			if a.json {
				return printJSON(a.out, &raftqv1.GrantResponse{})
			}
			what := "admin"
			if !admin {
				what = strings.Join(allow, ",") + " on " + pattern
			}
			_, err = fmt.Fprintf(a.out, "granted %s to %s\n", what, args[0])
			return err
		}),
	}
	cmd.Flags().StringVar(&pattern, "queue", "", "queue name pattern ('*' matches any run of characters)")
	cmd.Flags().StringSliceVar(&allow, "allow", nil, "permissions: produce, consume, browse, manage (comma-separated)")
	cmd.Flags().BoolVar(&admin, "admin", false, "give the admin role")
	return cmd
}

func newUngrantCmd(a *app) *cobra.Command {
	var (
		pattern string
		admin   bool
	)
	cmd := &cobra.Command{
		Use:   "ungrant NAME (--queue PATTERN | --admin)",
		Short: "Take an identity's grant on a pattern, or its admin role, away",
		Args:  cobra.ExactArgs(1),
		RunE: a.unary(func(ctx context.Context, c *client.Client, args []string) error {
			if admin == (pattern != "") {
				return fmt.Errorf("give --queue PATTERN or --admin")
			}
			if err := c.Ungrant(ctx, args[0], pattern, admin); err != nil {
				return err
			}
			a.settleAuth(ctx, c)
			if a.json {
				return printJSON(a.out, &raftqv1.UngrantResponse{})
			}
			what := "admin"
			if !admin {
				what = "the grant on " + pattern
			}
			_, err := fmt.Fprintf(a.out, "took %s from %s\n", what, args[0])
			return err
		}),
	}
	cmd.Flags().StringVar(&pattern, "queue", "", "the pattern of the grant to remove")
	cmd.Flags().BoolVar(&admin, "admin", false, "remove the admin role")
	return cmd
}

func newAuthListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List identities, their token names (never tokens) and grants",
		Args:  cobra.NoArgs,
		RunE: a.unary(func(ctx context.Context, c *client.Client, _ []string) error {
			ids, err := c.ListAuth(ctx)
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.out, &raftqv1.ListAuthResponse{Identities: ids})
			}
			tw := table(a.out)
			fmt.Fprintln(tw, "IDENTITY\tADMIN\tTOKENS\tGRANTS")
			for _, id := range ids {
				var toks, grants []string
				for _, t := range id.GetTokens() {
					s := t.GetName()
					if e := t.GetExpiresUnixMs(); e != 0 {
						s += " (expires " + time.UnixMilli(e).UTC().Format(time.RFC3339) + ")"
					}
					toks = append(toks, s)
				}
				for _, g := range id.GetGrants() {
					grants = append(grants, g.GetPattern()+"="+strings.Join(g.GetAllow(), ","))
				}
				fmt.Fprintf(tw, "%s\t%v\t%s\t%s\n", id.GetName(), id.GetAdmin(), orDash(strings.Join(toks, " ")), orDash(strings.Join(grants, " ")))
			}
			return tw.Flush()
		}),
	}
}

func newWhoAmICmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show who the cluster takes you for and what you may do",
		Args:  cobra.NoArgs,
		RunE: a.unary(func(ctx context.Context, c *client.Client, _ []string) error {
			w, err := c.WhoAmI(ctx)
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.out, w)
			}
			tw := table(a.out)
			fmt.Fprintf(tw, "identity:\t%s\nkind:\t%s\nadmin:\t%v\n", w.GetIdentity(), w.GetKind(), w.GetAdmin())
			for _, g := range w.GetGrants() {
				fmt.Fprintf(tw, "grant:\t%s %s\n", g.GetPattern(), strings.Join(g.GetAllow(), ","))
			}
			return tw.Flush()
		}),
	}
}

// authSettleTimeout bounds settleAuth's wait.
const authSettleTimeout = 5 * time.Second

// settleAuth waits until every reachable node has applied the auth
// change just made, so that the next command sees it through any node:
// each node checks credentials against its own copy of the replicated
// state, and a follower applies a change from a few milliseconds to a
// heartbeat after the leader, so a script's grant-then-use could
// otherwise be refused by a follower. The change is in the leader's state
// when its call returns, so the highest applied index any node reports
// covers it. Best effort: a node still behind after authSettleTimeout is
// named in a warning (a call through it may be refused until it catches
// up); a status the caller may not see in full ends the wait.
func (a *app) settleAuth(ctx context.Context, c *client.Client) {
	ctx, cancel := context.WithTimeout(ctx, authSettleTimeout)
	defer cancel()
	var target uint64
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := c.ClusterStatus(ctx)
		if err != nil || st.GetWithheld() {
			return
		}
		if target == 0 {
			// Fixed at the first answer: later writes need not be waited for.
			for _, n := range st.GetNodes() {
				target = max(target, n.GetAppliedIndex())
			}
		}
		var behind []string
		for _, n := range st.GetNodes() {
			if n.GetState() != "unreachable" && n.GetAppliedIndex() < target {
				behind = append(behind, n.GetId())
			}
		}
		if len(behind) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(a.errOut, "warning: not every node has applied the change yet (behind: %s); a call through those may be refused until they have\n",
				strings.Join(behind, ", "))
			return
		case <-tick.C:
		}
	}
}
