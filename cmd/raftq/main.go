// Command raftq is the single raftq binary: `raftq serve` runs a broker
// node, every other subcommand is a client of a running cluster.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/transport"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal starts a graceful stop, a second one kills.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the process exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{in: stdin, out: stdout, errOut: stderr, getenv: getenv, args: args}
	root := newRootCmd(a)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "raftq: %s\n", a.describe(ctx, err))
		return 1
	}
	return 0
}

// describeError is the one line printed for a failed command: the gRPC code
// and the broker's message when there is one.
func describeError(err error) string {
	var ue *client.UnreachableError
	if errors.As(err, &ue) {
		return describeUnreachable(ue, "", nil)
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return err.Error()
	}
	st := se.GRPCStatus()
	if plain, ok := plainTooLarge(st.Message()); ok {
		return fmt.Sprintf("%s: %s", st.Code(), plain)
	}
	msg := fmt.Sprintf("%s: %s", st.Code(), st.Message())
	if st.Code() != codes.DeadlineExceeded && errors.Is(err, context.DeadlineExceeded) {
		msg += " (gave up retrying: deadline exceeded)"
	}
	return msg
}

// describe is describeError with what the command knows besides the
// error: the CA file it used, and a look at addresses that answered in
// HTTP (a node's HTTP port given as --addr).
func (a *app) describe(ctx context.Context, err error) string {
	var ue *client.UnreachableError
	if errors.As(err, &ue) {
		return describeUnreachable(ue, a.usedCA, func(addr string, tls bool) (string, bool) {
			return probeHTTPPort(ctx, addr, tls, a.usedCA)
		})
	}
	return describeError(err)
}

// describeUnreachable says, for each address, what the refusal most
// likely means, then one hint for those it could not pin down. ca is the
// --tls-ca file ("" for none); probe, when not nil, reports whether addr
// is a raftq node's HTTP port and the gRPC address it gives.
func describeUnreachable(ue *client.UnreachableError, ca string, probe func(addr string, tls bool) (string, bool)) string {
	lines := []string{ue.Error()}
	var rest []string
	for i, addr := range ue.Addrs {
		reason := ""
		if i < len(ue.Reasons) {
			reason = ue.Reasons[i]
		}
		if note := refusalNote(addr, reason, ca, probe); note != "" {
			lines = append(lines, note)
		} else {
			rest = append(rest, reason)
		}
	}
	if len(rest) > 0 {
		// A TLS node hangs up on a plaintext client (EOF, or a reset,
		// depending on when the hang-up meets the client's preface: a
		// node that is not there refuses, it does not reset); a TLS
		// client meets certificate errors.
		tlsLike := false
		for _, r := range rest {
			if strings.Contains(r, "EOF") || strings.Contains(r, "connection reset") || strings.Contains(r, "tls:") || strings.Contains(r, "x509:") || strings.Contains(r, "certificate") {
				tlsLike = true
			}
		}
		if tlsLike {
			lines = append(lines, "If the cluster runs TLS: give --tls-ca FILE (or RAFTQ_CLIENT_TLS_CA), and --tls-cert/--tls-key for a client certificate; a certificate error above says what was refused.")
		} else {
			lines = append(lines, "Is a broker running there? Start one with `raftq serve` (or `make run`), or point --addr (or RAFTQ_ADDR) at one.")
		}
	}
	return strings.Join(lines, "\n")
}

// refusalNote is what one address's refusal means when that is clear, ""
// otherwise.
func refusalNote(addr, reason, ca string, probe func(addr string, tls bool) (string, bool)) string {
	switch {
	case strings.Contains(reason, "certificate signed by unknown authority"):
		if ca == "" {
			return addr + ": the node's certificate is not signed by a CA this machine trusts: give --tls-ca FILE, the CA the cluster's certificates were made with (raftq cert init's ca.pem)"
		}
		return addr + ": the node's certificate is not signed by the CA in --tls-ca (" + ca + "): give the CA the cluster's certificates were made with (raftq cert init's ca.pem)"
	case probe == nil:
		return ""
	}
	// An answer in HTTP/1.1, or TLS without HTTP/2: an HTTP server, most
	// likely a node's HTTP port. Ask it.
	var tls bool
	switch {
	case strings.Contains(reason, "looked like an HTTP/1.1 header"):
	case strings.Contains(reason, "speaks TLS but not gRPC"), strings.Contains(reason, "no application protocol"):
		tls = true
	case strings.Contains(reason, "does not look like a TLS handshake"):
	default:
		return ""
	}
	grpcAddr, ok := probe(addr, tls)
	switch {
	case !ok && strings.Contains(reason, "does not look like a TLS handshake"):
		return addr + " does not speak TLS: if the cluster runs without TLS, leave out --tls-ca (and RAFTQ_CLIENT_TLS_CA)"
	case !ok:
		return ""
	case grpcAddr == "":
		return addr + " is raftq's HTTP port (dashboard, /metrics), not its gRPC API: point --addr at the node's --grpc-addr (port 7400 by default)"
	}
	return addr + " is raftq's HTTP port (dashboard, /metrics), not its gRPC API, which listens on " + grpcAddr + ": give --addr " + grpcAddr
}

// probeHTTPPort asks addr for /healthz, which a raftq node answers
// without credentials and with its gRPC address in a header. Nothing is
// sent but the request; over TLS the node must show a certificate ca signs.
func probeHTTPPort(ctx context.Context, addr string, useTLS bool, ca string) (grpcAddr string, ok bool) {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	scheme := "http"
	if useTLS {
		if ca == "" {
			return "", false
		}
		pemBytes, err := os.ReadFile(ca)
		if err != nil {
			return "", false
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return "", false
		}
		scheme, tr.TLSClientConfig = "https", &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/healthz", nil)
	if err != nil {
		return "", false
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16))
	grpcAddr = resp.Header.Get(transport.GRPCAddrHeader)
	if resp.StatusCode != http.StatusOK || (grpcAddr == "" && string(body) != "ok\n") {
		return "", false
	}
	return grpcAddr, true
}

// app is what the client subcommands share: I/O streams and the
// persistent flags.
type app struct {
	in     io.Reader
	out    io.Writer
	errOut io.Writer
	getenv func(string) string
	// args is the command line, for error messages that show it fixed.
	args []string
	// isTerminal overrides the check that stdin is a terminal (tests).
	isTerminal func() bool

	addr    string
	json    bool
	timeout time.Duration
	verbose bool
	creds   clientCreds
	// usedCA is the CA file the command connected with (--tls-ca or
	// RAFTQ_CLIENT_TLS_CA), for error messages.
	usedCA string
	// token and tokenFile authenticate every call (env RAFTQ_TOKEN).
	token     string
	tokenFile string
}

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "raftq",
		Short: "raftq: a Raft-replicated work-queue broker",
		Long: "raftq runs a broker node (raftq serve) and talks to a running cluster\n" +
			"(every other command). Client commands reach the cluster through --addr.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       readBuildInfo().describe(),
	}
	// --version prints what `raftq version` does (no template actions in
	// the text, so braces in a version string cannot break it).
	root.SetVersionTemplate(strings.ReplaceAll(readBuildInfo().text(), "{{", "{{`{{`}}"))
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return flagError(cmd, a.args, err) })
	pf := root.PersistentFlags()
	pf.StringVar(&a.addr, "addr", "127.0.0.1:7400", "gRPC address of a node; a comma-separated list is a seed list (env RAFTQ_ADDR)")
	pf.BoolVar(&a.json, "json", false, "print protobuf JSON instead of tables (one object per line for deliveries)")
	pf.DurationVar(&a.timeout, "rpc-timeout", 15*time.Second, "deadline of each call to the cluster, retries included")
	pf.BoolVar(&a.verbose, "verbose", false, "log retries and redirects to stderr")
	addClientCredFlags(pf, &a.creds)
	pf.StringVar(&a.token, "token", "", "bearer token sent with every call (env RAFTQ_TOKEN); prefer --token-file, a flag shows in the process list")
	pf.StringVar(&a.tokenFile, "token-file", "", "file whose first line is the bearer token")

	root.AddCommand(
		newServeCmd(),
		newDevCmd(),
		newQueueCmd(a),
		newEnqueueCmd(a),
		newConsumeCmd(a),
		newConsumersCmd(a),
		newPeekCmd(a),
		newMessageCmd(a),
		newRedriveCmd(a),
		newClusterCmd(a),
		newCertCmd(),
		newVersionCmd(a),
		newAuthCmd(a),
		newConfigCmd(a),
		newBackupCmd(a),
	)
	// Shell completion (cobra's `raftq completion bash|zsh|fish|powershell`)
	// completes queue names from the cluster at --addr.
	for _, path := range [][]string{
		{"queue", "get"}, {"queue", "update"}, {"queue", "delete"}, {"queue", "purge"}, {"queue", "pause"}, {"queue", "resume"},
		{"enqueue"}, {"consume"}, {"consumers"}, {"peek"}, {"redrive"}, {"message", "show"},
	} {
		if c, rest, err := root.Find(path); err == nil && len(rest) == 0 {
			a.withQueueCompletion(c)
		}
	}
	return root
}

// group is a command that only holds subcommands. Cobra would print help
// and exit 0 for a mistyped subcommand; scripts need a failure.
func group(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
}

// seeds is --addr, or RAFTQ_ADDR when the flag was not given.
func (a *app) seeds(cmd *cobra.Command) []string {
	addr := a.addr
	if f := cmd.Flags().Lookup("addr"); (f == nil || !f.Changed) && a.getenv != nil {
		if env := a.getenv("RAFTQ_ADDR"); env != "" {
			addr = env
		}
	}
	var seeds []string
	for s := range strings.SplitSeq(addr, ",") {
		if s = strings.TrimSpace(s); s != "" {
			seeds = append(seeds, s)
		}
	}
	return seeds
}

// dial connects to the cluster named by the flags; the caller closes it.
func (a *app) dial(cmd *cobra.Command) (*client.Client, error) {
	level := slog.LevelWarn
	if a.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(a.errOut, &slog.HandlerOptions{Level: level}))
	// --rpc-timeout is for slow answers: with no node listening at all
	// the command says so at once, naming the addresses it tried.
	tok, err := a.bearer()
	if err != nil {
		return nil, err
	}
	opts := append([]client.Option{client.WithLogger(log), client.WithFailFast(), client.WithToken(tok)}, a.clientOptions(cmd)...)
	return client.Dial(cmd.Context(), a.seeds(cmd), opts...)
}

// bearer is the token to send: --token, else --token-file, else
// RAFTQ_TOKEN; "" for none.
func (a *app) bearer() (string, error) {
	switch {
	case a.token != "" && a.tokenFile != "":
		return "", errors.New("give --token or --token-file, not both")
	case a.token != "":
		return a.token, nil
	case a.tokenFile != "":
		tok, err := readTokenFile(a.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		return tok, nil
	case a.getenv != nil:
		return strings.TrimSpace(a.getenv("RAFTQ_TOKEN")), nil
	}
	return "", nil
}

// callCtx bounds one command's calls by --rpc-timeout.
func (a *app) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, a.timeout)
}

// unary is the shape of most client commands: dial, make calls under
// --rpc-timeout, close.
func (a *app) unary(fn func(ctx context.Context, c *client.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := a.dial(cmd)
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		return fn(ctx, c, args)
	}
}
