// Package compose tests the deployment as shipped: it builds the image
// with deploy/build-image.sh (what `make image` runs), brings up
// deploy/compose.yaml under a project of its own with docker-compose, and
// works the cluster through the ports it publishes on the host. It skips,
// saying why, when no Docker engine answers or docker-compose is missing.
package compose

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// deployment is one compose project of the test's own: its image tag,
// project name and published ports.
type deployment struct {
	t       *testing.T
	root    string // the repository
	image   string
	project string
	env     []string
	grpc    map[string]string // node id -> published gRPC address
}

// run runs a command and returns its combined output; a failure is the
// error, with the output.
func run(ctx context.Context, env []string, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// dockerOrSkip skips the test unless a Docker engine answers and
// docker-compose is installed.
func dockerOrSkip(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds an image and runs a compose cluster")
	}
	for _, bin := range []string{"docker", "docker-compose"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed: %v", bin, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := run(ctx, nil, "", "docker", "version", "--format", "{{.Server.Version}}"); err != nil {
		t.Skipf("no Docker engine answers: %v", strings.TrimSpace(out))
	}
}

// unique names one run: this process's id, which sweepStale reads to
// tell a run that is gone from one still going, and random bytes.
func unique(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(b))
}

// The names a run gives what it creates: the project raftqtest-PID-RAND
// and the image raftq:composetest-PID-RAND.
const (
	projectPrefix = "raftqtest-"
	imageRepo     = "raftq"
	imageTagPre   = "composetest-"
)

// runGone reports whether the run that named something with name (after
// its prefix) has ended: its process no longer exists. A process that
// exists, whatever it is, counts as running: sweeping is never worth
// removing another run's cluster.
func runGone(name string) bool {
	pidStr, _, ok := strings.Cut(name, "-")
	pid, err := strconv.Atoi(pidStr)
	if !ok || err != nil || pid <= 0 {
		return false // not named by this test
	}
	_, err = os.Stat(filepath.Join("/proc", pidStr))
	return errors.Is(err, fs.ErrNotExist)
}

// sweepStale removes what earlier runs of this test left behind when they
// could not clean up (killed, or stopped by go test's -timeout): the
// containers, networks and volumes of their compose projects and their
// images, once their process is gone.
func sweepStale(ctx context.Context, t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/self"); err != nil {
		return // no /proc to tell a finished run from a running one
	}
	projects := map[string]bool{}
	for _, kind := range []string{"container", "network", "volume"} {
		args := []string{kind, "ls", "--quiet", "--filter", "label=com.docker.compose.project", "--format", `{{.Label "com.docker.compose.project"}}`}
		if kind == "container" {
			args = append(args[:2], append([]string{"--all"}, args[2:]...)...)
		}
		out, err := run(ctx, nil, "", "docker", args...)
		if err != nil {
			t.Logf("sweep: list %ss: %v", kind, err)
			continue
		}
		for _, p := range strings.Fields(out) {
			if rest, ok := strings.CutPrefix(p, projectPrefix); ok && runGone(rest) {
				projects[p] = true
			}
		}
	}
	for p := range projects {
		label := "label=com.docker.compose.project=" + p
		for _, kind := range []string{"container", "network", "volume"} {
			args := []string{kind, "ls", "--quiet", "--filter", label}
			if kind == "container" {
				args = append(args, "--all")
			}
			out, err := run(ctx, nil, "", "docker", args...)
			if ids := strings.Fields(out); err == nil && len(ids) > 0 {
				rm := []string{kind, "rm"}
				switch kind {
				case "container":
					// --volumes: anonymous ones too (init's), which carry no
					// project label.
					rm = append(rm, "--force", "--volumes")
				case "volume":
					rm = append(rm, "--force")
				}
				if _, err := run(ctx, nil, "", "docker", append(rm, ids...)...); err != nil {
					t.Logf("sweep: %v", err)
				}
			}
		}
		t.Logf("removed what the ended run %s left", p)
	}
	// Containers a run started itself (docker run), named after it.
	if out, err := run(ctx, nil, "", "docker", "container", "ls", "--all", "--filter", "name="+projectPrefix, "--format", "{{.Names}}"); err == nil {
		for _, name := range strings.Fields(out) {
			if rest, ok := strings.CutPrefix(name, projectPrefix); ok && runGone(rest) {
				// --volumes: its anonymous data volume too.
				if _, err := run(ctx, nil, "", "docker", "container", "rm", "--force", "--volumes", name); err != nil {
					t.Logf("sweep: %v", err)
				} else {
					t.Logf("removed the container %s an ended run left", name)
				}
			}
		}
	}
	out, err := run(ctx, nil, "", "docker", "image", "ls", "--format", "{{.Tag}}", imageRepo)
	if err != nil {
		t.Logf("sweep: list images: %v", err)
		return
	}
	for _, tag := range strings.Fields(out) {
		if rest, ok := strings.CutPrefix(tag, imageTagPre); ok && runGone(rest) {
			if _, err := run(ctx, nil, "", "docker", "image", "rm", "--force", imageRepo+":"+tag); err != nil {
				t.Logf("sweep: %v", err)
			} else {
				t.Logf("removed the image %s:%s an ended run left", imageRepo, tag)
			}
		}
	}
}

// up starts deploy/compose.yaml on the image buildImage made; everything
// it made is removed when the test ends, whatever happened.
func up(ctx context.Context, t *testing.T, id, image string) *deployment {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{t: t, root: root, image: image, project: projectPrefix + id, grpc: map[string]string{}}

	ports, err := harness.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	d.env = []string{"RAFTQ_IMAGE=" + d.image, "RAFTQ_HOST_IP=127.0.0.1"}
	for i, node := range []string{"n1", "n2", "n3"} {
		n := strings.ToUpper(node)
		d.env = append(d.env,
			fmt.Sprintf("RAFTQ_%s_PORT=%d", n, ports[2*i]),
			fmt.Sprintf("RAFTQ_%s_HTTP_PORT=%d", n, ports[2*i+1]))
		d.grpc[node] = "127.0.0.1:" + strconv.Itoa(ports[2*i])
	}
	t.Cleanup(d.down)
	began := time.Now()
	if _, err := d.compose(ctx, "up", "-d"); err != nil {
		t.Fatalf("compose up: %v", err)
	}
	t.Logf("compose up in %v", time.Since(began).Round(time.Millisecond))
	return d
}

// buildImage sweeps what ended runs left, then builds the image with
// deploy/build-image.sh under a tag of this run's own, removed (and
// checked gone) when the test ends. It returns the run's id and the tag.
//
// The build has a budget of its own, bounded only by the test binary's
// deadline: a static -trimpath build compiles every package afresh, and
// on a loaded 2-core machine that alone took over 8 minutes, the whole
// budget of the scenario it was charged to (a fresh-clone make test
// failed on "build the image: signal: killed"). The scenario's own
// budget starts once the image exists.
func buildImage(t *testing.T) (id, image string) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t, 10*time.Minute)
	sweepStale(ctx, t)
	id = unique(t)
	image = imageRepo + ":" + imageTagPre + id
	began := time.Now()
	t.Cleanup(func() {
		// Last: the image (a removal of a missing one is not an error here).
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := run(cctx, nil, "", "docker", "image", "rm", "--force", image); err != nil && !strings.Contains(err.Error(), "No such image") {
			t.Errorf("remove image %s: %v", image, err)
		}
		if out, err := run(cctx, nil, "", "docker", "image", "ls", "--quiet", image); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("image %s still there after its removal: %q %v", image, out, err)
		}
	})
	if _, err := run(ctx, nil, root, "bash", filepath.Join(root, "deploy", "build-image.sh"), image); err != nil {
		t.Fatalf("build the image: %v", err)
	}
	t.Logf("built %s in %v", image, time.Since(began).Round(time.Millisecond))
	return id, image
}

func (d *deployment) compose(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"--project-name", d.project, "--file", filepath.Join(d.root, "deploy", "compose.yaml"), "--ansi", "never"}, args...)
	return run(ctx, d.env, d.root, "docker-compose", full...)
}

// down removes the project's containers, network and volumes, then checks
// nothing labelled with the project is left.
func (d *deployment) down() {
	t := d.t
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if t.Failed() {
		if out, err := d.compose(ctx, "logs", "--no-color", "--tail", "300"); err == nil {
			t.Logf("---- compose logs ----\n%s", out)
		}
	}
	label := "label=com.docker.compose.project=" + d.project
	mounted, err := d.mountedVolumes(ctx)
	if err != nil {
		t.Errorf("list the project's volumes: %v", err)
	}
	if _, err := d.compose(ctx, "down", "--volumes", "--remove-orphans", "--timeout", "2"); err != nil {
		t.Errorf("compose down: %v", err)
	}
	for _, v := range mounted {
		if out, err := run(ctx, nil, "", "docker", "volume", "ls", "--quiet", "--filter", "name=^"+v+"$"); err == nil && strings.TrimSpace(out) != "" {
			t.Errorf("volume %s of project %s left after down; removing it", v, d.project)
			_, _ = run(ctx, nil, "", "docker", "volume", "rm", "--force", v)
		}
	}
	for _, kind := range [][]string{
		{"container", "ls", "--all", "--quiet", "--filter", label},
		{"network", "ls", "--quiet", "--filter", label},
		{"volume", "ls", "--quiet", "--filter", label},
	} {
		out, err := run(ctx, nil, "", "docker", kind...)
		if err != nil {
			t.Errorf("list %ss: %v", kind[0], err)
			continue
		}
		if left := strings.Fields(out); len(left) > 0 {
			t.Errorf("%ss of project %s left after down: %v; removing them", kind[0], d.project, left)
			rm := []string{kind[0], "rm", "--force"}
			if kind[0] == "network" {
				rm = rm[:2]
			}
			_, _ = run(ctx, nil, "", "docker", append(rm, left...)...)
		}
	}
}

// testContext ends at most after limit, early enough before go test's
// -timeout (which panics, running no cleanup) to leave cleanupTime, and on
// SIGINT or SIGTERM (an interrupted run): the test then fails and its
// cleanup still removes everything it made. A second signal stops the
// process at once.
func testContext(t *testing.T, limit time.Duration) context.Context {
	const cleanupTime = 3 * time.Minute
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-sigCtx.Done(); stop() }()
	t.Cleanup(stop)
	deadline := time.Now().Add(limit)
	if d, ok := t.Deadline(); ok && d.Add(-cleanupTime).Before(deadline) {
		deadline = d.Add(-cleanupTime)
	}
	ctx, cancel := context.WithDeadline(sigCtx, deadline)
	t.Cleanup(cancel)
	return ctx
}

// mountedVolumes lists every volume the project's containers mount,
// anonymous ones (the image's VOLUME in a container that mounts nothing
// there) included: those carry no project label, so only this list finds
// one left behind.
func (d *deployment) mountedVolumes(ctx context.Context) ([]string, error) {
	out, err := run(ctx, nil, "", "docker", "container", "ls", "--all", "--quiet", "--filter", "label=com.docker.compose.project="+d.project)
	if err != nil || strings.TrimSpace(out) == "" {
		return nil, err
	}
	args := append([]string{"container", "inspect", "--format", `{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}} {{end}}{{end}}`}, strings.Fields(out)...)
	if out, err = run(ctx, nil, "", "docker", args...); err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// container is the id of a node's container.
func (d *deployment) container(ctx context.Context, node string) string {
	out, err := d.compose(ctx, "ps", "--quiet", node)
	if err != nil || strings.TrimSpace(out) == "" {
		d.t.Fatalf("container of %s: %q %v", node, out, err)
	}
	return strings.TrimSpace(out)
}

// TestComposeClusterSurvivesKilledLeader: the compose cluster forms with
// TLS from its init service, takes a workload through the published ports, loses its leader to docker
// kill, gets it back with docker start, goes through a rolling restart
// (docker-compose stop and start, node by node) that never shrinks it,
// and ends with every acknowledged message delivered and Verify agreeing
// on three replicas.
func TestComposeClusterSurvivesKilledLeader(t *testing.T) {
	dockerOrSkip(t)
	id, image := buildImage(t)
	ctx := testContext(t, 8*time.Minute)
	d := up(ctx, t, id, image)

	// The cluster speaks TLS only and, with TLS, wants a token: the
	// client trusts the CA the init service made and shows the bootstrap
	// token it drew, both copied out of a node's container.
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if _, err := run(ctx, nil, "", "docker", "cp", d.container(ctx, "n1")+":/etc/raftq/tls/ca.pem", caFile); err != nil {
		t.Fatalf("copy the CA out: %v", err)
	}
	tokenFile := filepath.Join(t.TempDir(), "bootstrap-token")
	if _, err := run(ctx, nil, "", "docker", "cp", d.container(ctx, "n1")+":/etc/raftq/tls/bootstrap-token", tokenFile); err != nil {
		t.Fatalf("copy the bootstrap token out: %v", err)
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, []string{d.grpc["n1"], d.grpc["n2"], d.grpc["n3"]}, client.WithTLS(caFile, "", ""),
		client.WithToken(strings.TrimSpace(string(token))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitHealthy := func(why string) *raftqv1.StatusResponse {
		t.Helper()
		var st *raftqv1.StatusResponse
		eventually(ctx, t, 90*time.Second, func() error {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			var err error
			if st, err = c.ClusterStatus(cctx); err != nil {
				return err
			}
			healthy := 0
			for _, n := range st.Nodes {
				if n.Suffrage == "voter" && n.Healthy {
					healthy++
				}
				// Clients are told the published ports.
				if n.GrpcAddr != d.grpc[n.Id] {
					return fmt.Errorf("%s advertises %q to clients, want the published %q", n.Id, n.GrpcAddr, d.grpc[n.Id])
				}
			}
			if healthy != 3 || st.LeaderId == "" {
				return fmt.Errorf("%s: %d healthy voters, leader %q", why, healthy, st.LeaderId)
			}
			return nil
		})
		return st
	}
	st := waitHealthy("forming")

	// On the compose network each node answers by its service name, over
	// TLS with its certificate naming it: a client container (the same
	// image, the CLI as entrypoint) asks each one alone.
	for _, node := range []string{"n1", "n2", "n3"} {
		out, err := run(ctx, nil, "", "docker", "run", "--rm", "--name", d.project+"-client-"+node,
			"--network", d.project+"_raftq", "--volume", d.project+"_tls:/etc/raftq/tls:ro", d.image,
			"--tls-ca", "/etc/raftq/tls/ca.pem", "--token-file", "/etc/raftq/tls/bootstrap-token",
			"--addr", node+":7400", "cluster", "status")
		if err != nil || !strings.Contains(out, "leader:") {
			t.Fatalf("cluster status from inside the network at %s:7400: %v\n%s", node, err, out)
		}
	}
	if _, err := c.CreateQueue(ctx, "compose", &raftqv1.QueueConfig{VisibilityTimeoutMs: 30_000}); err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		acked   = map[string]bool{}
		lastErr atomic.Value
		count   atomic.Int64
	)
	prodCtx, stopProducers := context.WithCancel(ctx)
	var producers sync.WaitGroup
	for p := range 4 {
		producers.Go(func() {
			for i := 0; prodCtx.Err() == nil; i++ {
				payload := fmt.Sprintf("p%d-%d", p, i)
				cctx, cancel := context.WithTimeout(prodCtx, 20*time.Second)
				_, err := c.Enqueue(cctx, "compose", &raftqv1.EnqueueMessage{Payload: []byte(payload)})
				cancel()
				if err != nil {
					lastErr.Store(err.Error())
					continue // outcome unknown: not counted as acknowledged
				}
				mu.Lock()
				acked[payload] = true
				mu.Unlock()
				count.Add(1)
			}
		})
	}
	defer func() { stopProducers(); producers.Wait() }()
	progress := func(n int64, why string) {
		t.Helper()
		from := count.Load()
		eventually(ctx, t, 90*time.Second, func() error {
			if got := count.Load() - from; got < n {
				return fmt.Errorf("%s: %d enqueues acknowledged, want %d (last error: %v)", why, got, n, lastErr.Load())
			}
			return nil
		})
	}
	progress(200, "before the kill")

	leader := st.LeaderId
	cid := d.container(ctx, leader)
	if _, err := run(ctx, nil, "", "docker", "kill", cid); err != nil {
		t.Fatalf("docker kill %s: %v", leader, err)
	}
	killed := time.Now()
	t.Logf("docker kill of the leader %s after %d acknowledged enqueues", leader, count.Load())
	progress(200, "after the kill")
	t.Logf("200 enqueues acknowledged %v after the kill", time.Since(killed).Round(time.Millisecond))
	if _, err := run(ctx, nil, "", "docker", "start", cid); err != nil {
		t.Fatalf("docker start %s: %v", leader, err)
	}
	waitHealthy("after the restart")
	progress(100, "after the restart")

	// A rolling restart as docker-compose does it, under the same load:
	// each node in turn is stopped (SIGTERM, and SIGKILL once the
	// service's stop_grace_period is over) and started again. A node hands
	// leadership over and stops in time (exit status 0, not 137 from the
	// SIGKILL), and stays a voter while it is down: the cluster never
	// shrinks.
	for _, node := range []string{"n1", "n2", "n3"} {
		cid := d.container(ctx, node)
		stopped := time.Now()
		if _, err := d.compose(ctx, "stop", node); err != nil {
			t.Fatalf("docker-compose stop %s: %v", node, err)
		}
		took := time.Since(stopped)
		out, err := run(ctx, nil, "", "docker", "inspect", "--format", "{{.State.ExitCode}}", cid)
		if err != nil {
			t.Fatal(err)
		}
		if code := strings.TrimSpace(out); code != "0" {
			t.Fatalf("%s exited with status %s after docker-compose stop (%v): it did not stop by itself within the stop timeout", node, code, took.Round(time.Millisecond))
		}
		st, err := c.ClusterStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		voters := 0
		for _, n := range st.Nodes {
			if n.Suffrage == "voter" {
				voters++
			}
		}
		if voters != 3 {
			t.Fatalf("with %s stopped the cluster has %d voters, want 3: %v", node, voters, st.Nodes)
		}
		if _, err := d.compose(ctx, "start", node); err != nil {
			t.Fatalf("docker-compose start %s: %v", node, err)
		}
		waitHealthy("after restarting " + node)
		progress(50, "after restarting "+node)
		t.Logf("rolling restart: %s stopped in %v", node, took.Round(time.Millisecond))
	}
	stopProducers()
	producers.Wait()
	t.Logf("%d enqueues acknowledged in all", count.Load())

	// Every acknowledged message is delivered.
	var (
		dmu  sync.Mutex
		seen = map[string]bool{}
	)
	conCtx, stopConsumer := context.WithCancel(ctx)
	con := client.NewConsumer(c, "compose", func(_ context.Context, dv *raftqv1.Delivery) error {
		dmu.Lock()
		seen[string(dv.Payload)] = true
		dmu.Unlock()
		return nil
	}, client.ConsumerOptions{Name: "compose-test", MaxInFlight: 64})
	var consumerErr error
	var consumer sync.WaitGroup
	consumer.Go(func() { consumerErr = con.Run(conCtx) })
	eventually(ctx, t, 2*time.Minute, func() error {
		mu.Lock()
		defer mu.Unlock()
		dmu.Lock()
		defer dmu.Unlock()
		missing := 0
		for p := range acked {
			if !seen[p] {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d acknowledged messages not delivered yet", missing, len(acked))
		}
		return nil
	})
	stopConsumer()
	consumer.Wait()
	if consumerErr != nil {
		t.Fatalf("consumer: %v", consumerErr)
	}

	eventually(ctx, t, 60*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		v, err := c.Verify(cctx)
		if err != nil {
			return err
		}
		if !v.Consistent || len(v.Nodes) != 3 {
			return fmt.Errorf("verify: consistent=%v nodes=%v", v.Consistent, v.Nodes)
		}
		return nil
	})

	// docker-compose down keeps the named volumes and nothing else (an
	// anonymous volume would be left behind by every down), and up brings
	// the same cluster back from them.
	before, err := c.GetQueue(ctx, "compose", false)
	if err != nil {
		t.Fatal(err)
	}
	mounted, err := d.mountedVolumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.compose(ctx, "down", "--timeout", "9"); err != nil {
		t.Fatalf("compose down: %v", err)
	}
	for _, v := range mounted {
		out, err := run(ctx, nil, "", "docker", "volume", "ls", "--quiet", "--filter", "name=^"+v+"$", "--filter", "label=com.docker.compose.project="+d.project)
		if err != nil {
			t.Fatal(err)
		}
		named := strings.TrimSpace(out) != ""
		out, err = run(ctx, nil, "", "docker", "volume", "ls", "--quiet", "--filter", "name=^"+v+"$")
		if err != nil {
			t.Fatal(err)
		}
		if exists := strings.TrimSpace(out) != ""; exists != named {
			t.Errorf("after docker-compose down, volume %s exists=%v but is one of the project's named volumes=%v", v, exists, named)
			if exists {
				// No container of the project mounts it any more: the
				// cleanup would not find it.
				_, _ = run(ctx, nil, "", "docker", "volume", "rm", "--force", v)
			}
		}
	}
	if _, err := d.compose(ctx, "up", "-d"); err != nil {
		t.Fatalf("compose up after down: %v", err)
	}
	waitHealthy("after down and up")
	after, err := c.GetQueue(ctx, "compose", false)
	if err != nil {
		t.Fatal(err)
	}
	if b, a := before.GetStats(), after.GetStats(); a.GetEnqueuedTotal() != b.GetEnqueuedTotal() || a.GetAckedTotal() != b.GetAckedTotal() {
		t.Fatalf("after down and up the queue holds %v, before %v", a, b)
	}
}

// eventually waits until cond holds, within timeout and while ctx lasts
// (an interrupted run stops waiting at once and cleans up).
func eventually(ctx context.Context, t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := harness.WaitFor(ctx, timeout, 20*time.Millisecond, func(context.Context) error { return cond() }); err != nil {
		t.Fatalf("condition not met: %v", err)
	}
}

// TestContainerMemoryFromCgroup: a node in a container started with
// --memory takes its memory defaults from the cgroup's limit, not the
// host's RAM: the cluster's default max_queued_bytes is a quarter of it,
// the write backlog an eighth, and the Go runtime's soft limit 90%.
func TestContainerMemoryFromCgroup(t *testing.T) {
	dockerOrSkip(t)
	id, image := buildImage(t)
	ctx := testContext(t, 6*time.Minute)

	const limit = 256 << 20
	ports, err := harness.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	name := projectPrefix + id + "-mem"
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if t.Failed() {
			if out, err := run(cctx, nil, "", "docker", "logs", "--tail", "100", name); err == nil {
				t.Logf("---- %s's log ----\n%s", name, out)
			}
		}
		// --volumes: the data volume the image declares, anonymous here.
		if _, err := run(cctx, nil, "", "docker", "container", "rm", "--force", "--volumes", name); err != nil {
			t.Errorf("remove container %s: %v", name, err)
		}
	})
	// The image's default command: serve --insecure, binding every
	// interface of the container; only loopback on the host is published.
	out, err := run(ctx, nil, "", "docker", "run", "--detach", "--name", name, "--memory", strconv.Itoa(limit),
		"--publish", addr+":7400", image)
	if err != nil {
		t.Fatalf("docker run: %v", err)
	}
	if strings.Contains(out, "does not support memory limit") {
		t.Skipf("this Docker engine cannot limit memory: %s", out)
	}
	if got, err := run(ctx, nil, "", "docker", "inspect", "--format", "{{.HostConfig.Memory}}", name); err != nil || strings.TrimSpace(got) != strconv.Itoa(limit) {
		t.Fatalf("container memory limit %q %v, want %d", got, err, limit)
	}

	c, err := client.Dial(ctx, []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eventually(ctx, t, 90*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		st, err := c.ClusterStatus(cctx)
		if err != nil {
			return err
		}
		// Settled by the first leader from its voters' proposals.
		if st.GetSettings() == nil {
			return errors.New("no cluster settings yet")
		}
		if got := st.GetSettings().GetMaxQueuedBytes(); got != limit/4 {
			t.Fatalf("cluster max_queued_bytes %d under a %d-byte cgroup limit, want %d (a quarter)", got, limit, limit/4)
		}
		return nil
	})
	logs, err := run(ctx, nil, "", "docker", "logs", name)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`msg="memory limit from the cgroup"`,
		fmt.Sprintf("limit_bytes=%d", limit),
		fmt.Sprintf("go_memory_limit=%d", limit/10*9),
		fmt.Sprintf("max_pending_bytes=%d", limit/8),
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the node's log does not say %s:\n%s", want, logs)
		}
	}
}
