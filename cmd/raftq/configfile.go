package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/fsm"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// A config file for raftq serve is YAML with one key per flag, named as
// the flag (node-id: n1). It is generic over the serve command's flag set,
// so every flag, including ones added later, is a key. Precedence: a flag
// on the command line, then RAFTQ_<FLAG>, then the file, then the default.

// configSetting is one key of a config file.
type configSetting struct {
	key, value string
	line       int
}

// readConfigFile parses path into settings; list values are joined with
// commas, as the list flags take them.
func readConfigFile(path string) ([]configSetting, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil // an empty file sets nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of flag names to values", path, root.Line)
	}
	var out []configSetting
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		s := configSetting{key: k.Value, line: k.Line}
		switch v.Kind {
		case yaml.ScalarNode:
			s.value = v.Value
		case yaml.SequenceNode:
			var items []string
			for _, it := range v.Content {
				if it.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("%s:%d: %s: want a list of plain values", path, it.Line, s.key)
				}
				items = append(items, it.Value)
			}
			s.value = strings.Join(items, ",")
		default:
			return nil, fmt.Errorf("%s:%d: %s: want a value or a list, not a mapping", path, v.Line, s.key)
		}
		out = append(out, s)
	}
	return out, nil
}

// applyConfig sets every flag of fs that is still unset (neither given
// nor from the environment) from the file's settings, and reports every
// unknown key and bad value, each with its line.
func applyConfig(path string, settings []configSetting, fs *pflag.FlagSet) error {
	var errs []error
	seen := map[string]int{} // key -> its first line
	for _, s := range settings {
		if first, ok := seen[s.key]; ok {
			// Not last-one-wins: which one the writer meant is a guess.
			errs = append(errs, fmt.Errorf("%s:%d: %s is set twice (first on line %d)", path, s.line, s.key, first))
			continue
		}
		seen[s.key] = s.line
		f := fs.Lookup(s.key)
		if f == nil || s.key == "config" {
			errs = append(errs, fmt.Errorf("%s:%d: unknown key %q (keys are raftq serve's flags, e.g. node-id)", path, s.line, s.key))
			continue
		}
		if f.Changed {
			continue // a flag or RAFTQ_ variable overrides the file
		}
		if err := fs.Set(s.key, s.value); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %s: %q: %w", path, s.line, s.key, s.value, err))
		}
	}
	return errors.Join(errs...)
}

// newConfigCmd is `raftq config check FILE`.
func newConfigCmd(a *app) *cobra.Command {
	cmd := group("config", "Work with raftq serve's config file")
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Report unknown keys and bad values in a raftq serve --config file",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			settings, err := readConfigFile(args[0])
			if err != nil {
				return err
			}
			// A fresh serve flag set: the same names, types and parsing
			// serve applies, then the checks serve makes before it starts.
			serve, o := serveCommand()
			fs := serve.Flags()
			errs := []error{applyConfig(args[0], settings, fs)}
			line := map[string]int{}
			for _, s := range settings {
				if _, ok := line[s.key]; !ok {
					line[s.key] = s.line
				}
			}
			for _, p := range checkServeOptions(o, fs) {
				// Every default passes, so the value is the file's.
				errs = append(errs, fmt.Errorf("%s:%d: %s: %q: %w", args[0], line[p.flag], p.flag, fs.Lookup(p.flag).Value, p.err))
			}
			if err := errors.Join(errs...); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.out, "%s: ok, %s\n", args[0], plural(len(settings), "setting"))
			return err
		},
	}
	cmd.AddCommand(check)
	return cmd
}

// optionProblem is a serve flag whose value serve would refuse.
type optionProblem struct {
	flag string
	err  error
}

// checkServeOptions makes the checks of serve's options that need neither
// the network nor the data dir: serve makes them before it starts, and
// config check reports them for a file. fs says which flags were set (for
// the TLS trio, the one to blame).
func checkServeOptions(o *serveOptions, fs *pflag.FlagSet) []optionProblem {
	var ps []optionProblem
	bad := func(flag string, err error) { ps = append(ps, optionProblem{flag, err}) }
	var l slog.Level
	if err := l.UnmarshalText([]byte(o.logLevel)); err != nil {
		bad("log-level", errors.New("want debug, info, warn or error"))
	}
	if o.auth.mode != "" {
		if _, err := auth.ParseMode(o.auth.mode); err != nil {
			bad("auth", errors.New("want none, token or mtls"))
		}
	}
	if o.auth.adminCN != "" {
		if err := fsm.ValidateIdentity(o.auth.adminCN); err != nil {
			bad("admin-cn", err)
		}
	}
	if o.metricsTopKeys < 0 {
		bad("metrics-top-keys", errors.New("want 0 (off) or more"))
	}
	if o.stallAfter <= 0 {
		bad("dashboard-stall-after", errors.New("want a duration above 0"))
	}
	if o.bootstrapExpect < 0 {
		bad("bootstrap-expect", errors.New("want 0 or more voters"))
	}
	for _, a := range []struct {
		flag, addr string
	}{{"grpc-addr", o.grpcAddr}, {"raft-addr", o.raftAddr}, {"gossip-addr", o.gossipAddr}, {"http-addr", o.httpAddr}} {
		if a.addr == "" && a.flag == "http-addr" {
			continue // off
		}
		if err := checkBindAddr(a.addr); err != nil {
			bad(a.flag, err)
		}
	}
	if o.advertiseGRPC != "" {
		if err := checkHostPort(o.advertiseGRPC); err != nil {
			bad("advertise-grpc-addr", err)
		}
	}
	if o.advertiseHTTP != "" {
		if err := checkHostPort(o.advertiseHTTP); err != nil {
			bad("advertise-http-addr", err)
		}
	}
	if o.tls.Enabled() && (o.tls.Cert == "" || o.tls.Key == "" || o.tls.CA == "") {
		for _, f := range []string{"tls-cert", "tls-key", "tls-ca"} {
			if fs.Changed(f) {
				bad(f, errors.New("TLS needs all of --tls-cert, --tls-key and --tls-ca"))
				break
			}
		}
	}
	return ps
}

// checkBindAddr checks a listen address as net.Listen reads it: host:port,
// the host possibly empty (every interface), the port 0-65535 or a
// service name.
func checkBindAddr(s string) error {
	_, p, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if _, err := net.LookupPort("tcp", p); err != nil {
		return fmt.Errorf("port %q is neither a number in 0-65535 nor a service name", p)
	}
	return nil
}
