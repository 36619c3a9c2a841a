package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagError rewrites pflag's "unknown flag" into what most likely went
// wrong. raftq's flags take two dashes (-h aside), so a single-dash word
// is either a long flag with one dash too few (-json) or an argument that
// starts with '-' (a queue named -jobs, a payload -5), which must go after
// --; a mistyped --flag gets the flag it most likely meant. args is the
// command line, to show the corrected one.
func flagError(cmd *cobra.Command, args []string, err error) error {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) {
		return err
	}
	flags := flagNames(cmd)
	if short := ne.GetSpecifiedShortnames(); short != "" {
		token := "-" + short
		if slices.Contains(flags, short) {
			return fmt.Errorf("unknown flag %s: did you mean --%s? (flags take two dashes)", token, short)
		}
		return fmt.Errorf("unknown flag %s: an argument that starts with '-' goes after --, as in: %s", token, afterDashes(args, token))
	}
	name := ne.GetSpecifiedName()
	if best := closest(name, flags); best != "" {
		return fmt.Errorf("unknown flag --%s: did you mean --%s?", name, best)
	}
	return fmt.Errorf("unknown flag --%s (%s --help lists its flags)", name, cmd.CommandPath())
}

// flagNames lists the long flags cmd takes, its own and inherited.
func flagNames(cmd *cobra.Command) []string {
	var names []string
	add := func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	}
	cmd.LocalFlags().VisitAll(add)
	cmd.InheritedFlags().VisitAll(add)
	slices.Sort(names)
	return slices.Compact(names)
}

// closest is the flag name that typed most likely meant: the one it is a
// prefix of (an abbreviation), else the nearest within two edits; "" when
// none is close or two tie.
func closest(typed string, names []string) string {
	var prefixed []string
	for _, n := range names {
		if strings.HasPrefix(n, typed) {
			prefixed = append(prefixed, n)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	best, bestD, tie := "", 3, false
	for _, n := range names {
		switch d := editDistance(typed, n); {
		case d < bestD:
			best, bestD, tie = n, d, false
		case d == bestD:
			tie = true
		}
	}
	if tie || bestD > 2 || bestD >= len(typed) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, with a swap of
// two neighbours (dql for dlq) counted as one edit.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// afterDashes is the command line args with token moved after --.
func afterDashes(args []string, token string) string {
	out := []string{"raftq"}
	moved := false
	for _, a := range args {
		if a == token && !moved {
			moved = true
			continue
		}
		out = append(out, a)
	}
	return strings.Join(append(out, "--", token), " ")
}
