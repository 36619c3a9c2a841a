package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/term"
)

// interactive reports whether stdin is a terminal a person can answer on.
func (a *app) interactive() bool {
	if a.isTerminal != nil {
		return a.isTerminal()
	}
	// A terminal, not any character device: /dev/null is one too (stdin
	// of cron, systemd and `docker run` without -t), and a question
	// asked there is never answered.
	f, ok := a.in.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// confirm asks question on a terminal and reports a "y"/"yes" answer.
// Without a terminal nobody can answer: the command needs --force.
func (a *app) confirm(force bool, what, question string) error {
	if force {
		return nil
	}
	if !a.interactive() {
		return fmt.Errorf("refusing to %s without confirmation: stdin is not a terminal; pass --force", what)
	}
	fmt.Fprintf(a.errOut, "%s [y/N] ", question)
	line, err := bufio.NewReader(a.in).ReadString('\n')
	if err != nil && line == "" {
		return errors.New("no answer; nothing done")
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errors.New("not confirmed; nothing done")
}
