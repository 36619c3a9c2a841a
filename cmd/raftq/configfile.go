package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

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
	for _, s := range settings {
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
			// serve applies.
			if err := applyConfig(args[0], settings, newServeCmd().Flags()); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.out, "%s: ok, %d settings\n", args[0], len(settings))
			return err
		},
	}
	cmd.AddCommand(check)
	return cmd
}
