package dashboard

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// The pages' changes. Each is a POST (the auth middleware in front
// checks the session's CSRF token before the handler runs) that calls the
// Backend method standing for the gRPC method of the same name, so the
// caller's grants, the validation and the error wording are the API's.
// A success redirects (post/redirect/get: a reload does not repeat it)
// to the page with a note of what was done; a failure renders the page
// again with the API's error and the HTTP status it maps to.
//
// Destructive changes (purge, delete) take two steps that need no
// script: the first POST renders a confirmation page whose form carries
// confirm=<queue name>, and only a POST with that value acts. The
// confirmation form also carries an idempotency key drawn when it was
// rendered, so a purge submitted twice purges once.

// done notes, by the ?done= value a change redirects with.
var doneNotes = map[string]func(q url.Values) string{
	"created":      func(q url.Values) string { return "Created queue " + q.Get("queue") + "." },
	"updated":      func(q url.Values) string { return "Updated " + q.Get("fields") + "." },
	"unchanged":    func(url.Values) string { return "Nothing to update: every field is as it was." },
	"purged":       func(q url.Values) string { return "Purged " + countOf(q.Get("n"), "message") + "." },
	"published":    func(q url.Values) string { return "Published message " + q.Get("id") + "." },
	"acked":        func(q url.Values) string { return "Acked message " + q.Get("id") + ": it is gone." },
	"nacked":       func(q url.Values) string { return "Nacked message " + q.Get("id") + ": it is delivered again." },
	"deadlettered": func(q url.Values) string { return "Moved message " + q.Get("id") + " to the dead-letter queue." },
	"deleted":      func(q url.Values) string { return "Deleted queue " + q.Get("queue") + "." },
	"redriven": func(q url.Values) string {
		return "Redrive moved " + countOf(q.Get("n"), "message") + " back to " + q.Get("queue") + "."
	},
	"redrive-dry": func(q url.Values) string {
		return "Dry run: a redrive would move " + countOf(q.Get("n"), "message") + " back to " + q.Get("queue") + "; nothing moved."
	},
	"redrive-cancelled": func(q url.Values) string {
		return "Cancelled the redrive to " + q.Get("queue") + "; it had moved " + countOf(q.Get("n"), "message") + "."
	},
	"redrive-job": func(q url.Values) string {
		return "Redrive of " + countOf(q.Get("n"), "message") + " back to " + q.Get("queue") + " started at " + q.Get("rate") + " a second; its progress is below."
	},
}

// doneNote is the note of a page's ?done=, "" for none or an unknown one
// (only these fixed sentences are shown: a link cannot put words on the
// page).
func doneNote(r *http.Request) string {
	q := r.URL.Query()
	if f, ok := doneNotes[q.Get("done")]; ok {
		return f(q)
	}
	return ""
}

// countOf is "1 message", "3 messages"; a count that is not a number
// shows as "some messages".
func countOf(n, noun string) string {
	v, err := strconv.ParseInt(n, 10, 64)
	switch {
	case err != nil:
		return "some " + noun + "s"
	case v == 1:
		return "1 " + noun
	}
	return strconv.FormatInt(v, 10) + " " + noun + "s"
}

func doneURL(path, action string, kv ...string) string {
	v := url.Values{"done": {action}}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return path + "?" + v.Encode()
}

func qpath(name string) string { return "/queues/" + url.PathEscape(name) }

// idempotencyKey is drawn for each confirmation or redrive form rendered.
func idempotencyKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "dashboard-" + hex.EncodeToString(b[:])
}

// form parses a POST's form; a body that is no form is InvalidArgument.
func form(r *http.Request) (url.Values, error) {
	if err := r.ParseForm(); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return r.PostForm, nil
}

// durationField reads a duration field ("30s", "10m", "1h30m"; blank is
// absent) as milliseconds, the API's unit.
func durationField(f url.Values, field, label string) (ms int64, present bool, err error) {
	s := strings.TrimSpace(f.Get(field))
	if s == "" {
		return 0, false, nil
	}
	if s == "0" {
		return 0, true, nil
	}
	d, err := parseDuration(s)
	switch {
	case err != nil:
		return 0, false, status.Errorf(codes.InvalidArgument, "%s %q is not a duration: write it as 30s, 10m or 1h30m (0 for the default)", label, s)
	case d < 0:
		return 0, false, status.Errorf(codes.InvalidArgument, "%s must not be negative (got %s)", label, s)
	case d%time.Millisecond != 0:
		return 0, false, status.Errorf(codes.InvalidArgument, "%s %s has a fraction of a millisecond, the broker's resolution", label, s)
	}
	return d.Milliseconds(), true, nil
}

// parseDuration is time.ParseDuration that also reads days as the pages
// write them ("3 days", "1.5 days", "7d").
func parseDuration(s string) (time.Duration, error) {
	for _, suffix := range []string{" days", " day", "d"} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
			if err != nil || v > 1e6 {
				return 0, errors.New("bad days")
			}
			return time.Duration(v * float64(24*time.Hour)).Round(time.Millisecond), nil
		}
	}
	return time.ParseDuration(s)
}

// intField reads a whole-number field (blank is absent).
func intField(f url.Values, field, label string) (v int64, present bool, err error) {
	s := strings.TrimSpace(f.Get(field))
	if s == "" {
		return 0, false, nil
	}
	v, err = strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false, status.Errorf(codes.InvalidArgument, "%s %q is not a whole number", label, s)
	}
	return v, true, nil
}

// configField is one QueueConfig field the create and update forms edit.
type configField struct {
	path, label string // the update_mask path; what the form calls it
	duration    bool
	text        bool
	get         func(*raftqv1.QueueConfig) int64
	set         func(*raftqv1.QueueConfig, int64)
}

var configFields = []configField{
	{path: "visibility_timeout_ms", label: "visibility timeout", duration: true,
		get: (*raftqv1.QueueConfig).GetVisibilityTimeoutMs, set: func(c *raftqv1.QueueConfig, v int64) { c.VisibilityTimeoutMs = v }},
	{path: "max_deliveries", label: "max deliveries",
		get: func(c *raftqv1.QueueConfig) int64 { return int64(c.GetMaxDeliveries()) }, set: func(c *raftqv1.QueueConfig, v int64) { c.MaxDeliveries = int32(v) }},
	{path: "dead_letter_queue", label: "dead-letter queue", text: true},
	{path: "max_depth", label: "max depth",
		get: (*raftqv1.QueueConfig).GetMaxDepth, set: func(c *raftqv1.QueueConfig, v int64) { c.MaxDepth = v }},
	{path: "message_ttl_ms", label: "message TTL", duration: true,
		get: (*raftqv1.QueueConfig).GetMessageTtlMs, set: func(c *raftqv1.QueueConfig, v int64) { c.MessageTtlMs = v }},
	{path: "dedup_window_ms", label: "dedup window", duration: true,
		get: (*raftqv1.QueueConfig).GetDedupWindowMs, set: func(c *raftqv1.QueueConfig, v int64) { c.DedupWindowMs = v }},
}

// configFromForm reads the config fields of a create or update form; the
// paths are those the form filled in.
func configFromForm(f url.Values) (*raftqv1.QueueConfig, []string, error) {
	cfg := &raftqv1.QueueConfig{}
	var paths []string
	for _, cf := range configFields {
		if cf.text {
			if _, ok := f[cf.path]; ok {
				cfg.DeadLetterQueue = strings.TrimSpace(f.Get(cf.path))
				paths = append(paths, cf.path)
			}
			continue
		}
		var v int64
		var present bool
		var err error
		if cf.duration {
			v, present, err = durationField(f, cf.path, cf.label)
		} else {
			v, present, err = intField(f, cf.path, cf.label)
		}
		if err != nil {
			return nil, nil, err
		}
		if present {
			if !cf.duration && cf.path == "max_deliveries" && (v < 0 || v > 1<<31-1) {
				return nil, nil, status.Errorf(codes.InvalidArgument, "max deliveries %d is out of range", v)
			}
			cf.set(cfg, v)
			paths = append(paths, cf.path)
		}
	}
	return cfg, paths, nil
}

func (d *Dashboard) createQueue(w http.ResponseWriter, r *http.Request) {
	f, err := form(r)
	if err != nil {
		d.queuesFailed(w, r, "Create", err)
		return
	}
	name := strings.TrimSpace(f.Get("name"))
	cfg, _, err := configFromForm(f)
	if err != nil {
		d.queuesFailed(w, r, "Create", err)
		return
	}
	ctx, cancel := d.callCtx(r)
	defer cancel()
	if _, err := d.b.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: name, Config: cfg}); err != nil {
		d.queuesFailed(w, r, "Create", err)
		return
	}
	d.audit(r, "CreateQueue", name)
	http.Redirect(w, r, doneURL(qpath(name), "created", "queue", name), http.StatusSeeOther)
}

// updateQueue changes the fields whose value differs from the queue's
// config as this node holds it (the form was filled from it): a field
// left as it was is not in the update mask, so it is not overwritten.
func (d *Dashboard) updateQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	f, err := form(r)
	if err != nil {
		d.queueFailed(w, r, name, "Update", err)
		return
	}
	cfg, paths, err := configFromForm(f)
	if err != nil {
		d.queueFailed(w, r, name, "Update", err)
		return
	}
	ctx, cancel := d.callCtx(r)
	defer cancel()
	cur, err := d.b.LocalQueue(ctx, name)
	if err != nil {
		d.queueFailed(w, r, name, "Update", err)
		return
	}
	var mask, labels []string
	for _, p := range paths {
		for _, cf := range configFields {
			if cf.path != p {
				continue
			}
			changed := cf.text && cfg.GetDeadLetterQueue() != cur.GetConfig().GetDeadLetterQueue() ||
				!cf.text && cf.get(cfg) != cf.get(cur.GetConfig())
			if changed {
				mask, labels = append(mask, p), append(labels, cf.label)
			}
		}
	}
	if len(mask) == 0 {
		http.Redirect(w, r, doneURL(qpath(name), "unchanged"), http.StatusSeeOther)
		return
	}
	if _, err := d.b.UpdateQueue(ctx, &raftqv1.UpdateQueueRequest{Name: name, Config: cfg, UpdateMask: &fieldmaskpb.FieldMask{Paths: mask}}); err != nil {
		d.queueFailed(w, r, name, "Update", err)
		return
	}
	d.audit(r, "UpdateQueue", name)
	http.Redirect(w, r, doneURL(qpath(name), "updated", "fields", strings.Join(labels, ", ")), http.StatusSeeOther)
}

// confirmBody is the confirmation page of a destructive change.
type confirmBody struct {
	Queue    string
	Action   string // the button's word: "Purge", "Delete"
	Question string
	Detail   string
	Post     string // where the confirmed form posts
	Fields   map[string]string
}

// confirmed reports whether f confirms a destructive change of queue;
// when not, it has rendered the confirmation page.
func (d *Dashboard) confirmed(w http.ResponseWriter, r *http.Request, f url.Values, c confirmBody) bool {
	if f.Get("confirm") == c.Queue && c.Queue != "" {
		return true
	}
	c.Fields["confirm"] = c.Queue
	c.Fields["idempotency_key"] = idempotencyKey()
	d.render(w, r, http.StatusOK, "confirm", c.Action+" "+c.Queue+"?", c)
	return false
}

func (d *Dashboard) purgeQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	f, err := form(r)
	if err != nil {
		d.queueFailed(w, r, name, "Purge", err)
		return
	}
	ctx, cancel := d.callCtx(r)
	defer cancel()
	c := confirmBody{Queue: name, Action: "Purge", Post: qpath(name) + "/purge", Fields: map[string]string{},
		Question: "Purge every message of " + name + "?",
		Detail:   "Ready and delayed messages are removed and cannot be brought back; messages leased now are not purged."}
	if q, err := d.b.LocalQueue(ctx, name); err == nil {
		st := q.GetStats()
		c.Detail = fmt.Sprintf("It holds %s ready and %s delayed, which are removed and cannot be brought back.",
			countOf(strconv.FormatInt(st.GetReady(), 10), "message"), countOf(strconv.FormatInt(st.GetDelayed(), 10), "message"))
		if n := st.GetInFlight(); n > 0 {
			c.Detail += fmt.Sprintf(" The %s leased now are not purged.", countOf(strconv.FormatInt(n, 10), "message"))
		}
	}
	if !d.confirmed(w, r, f, c) {
		return
	}
	n, err := d.b.PurgeQueue(ctx, &raftqv1.PurgeQueueRequest{Name: name, IdempotencyKey: f.Get("idempotency_key")})
	if err != nil {
		d.queueFailed(w, r, name, "Purge", err)
		return
	}
	d.audit(r, "PurgeQueue", name)
	http.Redirect(w, r, doneURL(qpath(name), "purged", "n", strconv.FormatInt(n, 10)), http.StatusSeeOther)
}

func (d *Dashboard) deleteQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	f, err := form(r)
	if err != nil {
		d.queueFailed(w, r, name, "Delete", err)
		return
	}
	// Only if empty unless the box was unticked; a confirmed form
	// carries the choice as if_empty=on|off.
	ifEmpty := f.Get("if_empty") == "on"
	c := confirmBody{Queue: name, Action: "Delete", Post: qpath(name) + "/delete", Fields: map[string]string{"if_empty": f.Get("if_empty")},
		Question: "Delete queue " + name + "?",
		Detail:   "Its settings and every message it holds are removed and cannot be brought back."}
	if ifEmpty {
		c.Detail = "Its settings are removed; the delete is refused if it still holds messages (ready, delayed, leased or dead-lettered)."
	} else {
		c.Fields["if_empty"] = "off"
	}
	if !d.confirmed(w, r, f, c) {
		return
	}
	ctx, cancel := d.callCtx(r)
	defer cancel()
	if err := d.b.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: name, IfEmpty: ifEmpty}); err != nil {
		d.queueFailed(w, r, name, "Delete", err)
		return
	}
	d.audit(r, "DeleteQueue", name)
	http.Redirect(w, r, doneURL("/queues", "deleted", "queue", name), http.StatusSeeOther)
}

func (d *Dashboard) publish(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	f, err := form(r)
	if err != nil {
		d.queueFailed(w, r, name, "Publish", err)
		return
	}
	m := &raftqv1.EnqueueMessage{Payload: []byte(f.Get("payload")), FairnessKey: strings.TrimSpace(f.Get("fairness_key")), DedupId: strings.TrimSpace(f.Get("dedup_id"))}
	prio, _, err := intField(f, "priority", "priority")
	if err == nil && (prio < -1<<31 || prio > 1<<31-1) {
		err = status.Errorf(codes.InvalidArgument, "priority %d is out of range", prio)
	}
	if err != nil {
		d.queueFailed(w, r, name, "Publish", err)
		return
	}
	m.Priority = int32(prio)
	if m.DelayMs, _, err = durationField(f, "delay", "delay"); err != nil {
		d.queueFailed(w, r, name, "Publish", err)
		return
	}
	ctx, cancel := d.callCtx(r)
	defer cancel()
	ids, err := d.b.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: name, Messages: []*raftqv1.EnqueueMessage{m}})
	if err != nil {
		d.queueFailed(w, r, name, "Publish", err)
		return
	}
	id := ""
	if len(ids) > 0 {
		id = ids[0]
	}
	http.Redirect(w, r, doneURL(qpath(name), "published", "id", id), http.StatusSeeOther)
}

// getWait bounds how long Get waits for a delivery: the queue may have
// nothing ready, or only throttled or delayed messages.
const getWait = 2 * time.Second

// getMessage leases one message and shows it with Ack and Nack buttons.
// The page is the answer to the POST (the lease token is not put in a
// link); the lease is held by the node until settled or due.
func (d *Dashboard) getMessage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	f, err := form(r)
	if err != nil {
		d.queueFailed(w, r, name, "Get", err)
		return
	}
	vis, _, err := durationField(f, "lease", "lease")
	if err != nil {
		d.queueFailed(w, r, name, "Get", err)
		return
	}
	ctx, cancel := d.callCtx(r)
	defer cancel()
	dl, err := d.b.Get(ctx, &raftqv1.LeaseRequest{Queue: name, ConsumerName: "dashboard@" + d.b.NodeID(), MaxInFlight: 1, VisibilityTimeoutMs: vis, Limit: 1}, min(getWait, d.cfg.CallTimeout))
	if err != nil {
		d.queueFailed(w, r, name, "Get", err)
		return
	}
	d.audit(r, "Get", name)
	d.renderQueue(w, r, http.StatusOK, name, queueExtras{Leased: dl, GotNothing: dl == nil})
}

func (d *Dashboard) ack(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	f, err := form(r)
	if err != nil {
		d.queueFailed(w, r, name, "Ack", err)
		return
	}
	id := f.Get("id")
	ctx, cancel := d.callCtx(r)
	defer cancel()
	if err := d.b.Ack(ctx, name, &raftqv1.LeaseRef{MessageId: id, LeaseToken: f.Get("lease_token")}); err != nil {
		d.queueFailed(w, r, name, "Ack", err)
		return
	}
	http.Redirect(w, r, doneURL(qpath(name), "acked", "id", id), http.StatusSeeOther)
}

func (d *Dashboard) nack(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	f, err := form(r)
	if err != nil {
		d.queueFailed(w, r, name, "Nack", err)
		return
	}
	id := f.Get("id")
	item := &raftqv1.NackItem{MessageId: id, LeaseToken: f.Get("lease_token"), DeadLetter: f.Get("dead_letter") == "on", Reason: strings.TrimSpace(f.Get("reason"))}
	if item.DelayMs, _, err = durationField(f, "delay", "delay"); err != nil {
		d.queueFailed(w, r, name, "Nack", err)
		return
	}
	ctx, cancel := d.callCtx(r)
	defer cancel()
	if err := d.b.Nack(ctx, name, item); err != nil {
		d.queueFailed(w, r, name, "Nack", err)
		return
	}
	done := "nacked"
	if item.DeadLetter {
		done = "deadlettered"
	}
	http.Redirect(w, r, doneURL(qpath(name), done, "id", id), http.StatusSeeOther)
}

func (d *Dashboard) redrive(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	f, err := form(r)
	if err != nil {
		d.queueFailed(w, r, name, "Redrive", err)
		return
	}
	limit, _, err := intField(f, "limit", "limit")
	if err == nil && limit < 0 {
		err = status.Errorf(codes.InvalidArgument, "limit must be a whole number ≥ 0 (0 = all), not %q", f.Get("limit"))
	}
	if err != nil {
		d.queueFailed(w, r, name, "Redrive", err)
		return
	}
	req := &raftqv1.RedriveRequest{Queue: name, Limit: limit, IdempotencyKey: f.Get("idempotency_key"),
		FairnessKey: f.Get("fairness_key"), ReasonContains: f.Get("reason_contains"), DryRun: f.Get("dry_run") != "", CancelJob: f.Get("cancel_job")}
	if err == nil {
		req.OlderThanMs, _, err = durationField(f, "older_than", "older than")
	}
	if s := strings.TrimSpace(f.Get("rate_per_sec")); err == nil && s != "" {
		if req.RatePerSec, err = strconv.ParseFloat(s, 64); err != nil {
			err = status.Errorf(codes.InvalidArgument, "rate %q is not a number of messages per second", s)
		}
	}
	for _, id := range strings.FieldsFunc(f.Get("message_ids"), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' }) {
		req.MessageIds = append(req.MessageIds, id)
	}
	if err != nil {
		d.queueFailed(w, r, name, "Redrive", err)
		return
	}
	ctx, cancel := d.callCtx(r)
	defer cancel()
	moved, err := d.b.Redrive(ctx, req)
	if err != nil {
		d.queueFailed(w, r, d.backTo(f, name), "Redrive", err)
		return
	}
	d.log.Info("dashboard: redrive", "queue", name, "limit", limit, "moved", moved, "dry_run", req.DryRun, "rate", req.RatePerSec, "remote", r.RemoteAddr)
	// Back to the page the button was on: the queue's, or its DLQ's.
	back := d.backTo(f, name)
	n := strconv.FormatInt(moved, 10)
	switch {
	case req.CancelJob != "":
		http.Redirect(w, r, doneURL(qpath(back), "redrive-cancelled", "n", n, "queue", name), http.StatusSeeOther)
	case req.DryRun:
		http.Redirect(w, r, doneURL(qpath(back), "redrive-dry", "n", n, "queue", name), http.StatusSeeOther)
	case req.RatePerSec > 0 && moved > 0:
		http.Redirect(w, r, doneURL(qpath(back), "redrive-job", "n", n, "queue", name, "rate", strconv.FormatFloat(req.RatePerSec, 'g', -1, 64)), http.StatusSeeOther)
	default:
		http.Redirect(w, r, doneURL(qpath(back), "redriven", "n", n, "queue", name), http.StatusSeeOther)
	}
}

// backTo is the queue page a form came from (field "back"), else queue.
func (d *Dashboard) backTo(f url.Values, queue string) string {
	if b := f.Get("back"); b != "" {
		return b
	}
	return queue
}

func (d *Dashboard) audit(r *http.Request, action, queue string) {
	d.log.Info("dashboard: change", "action", action, "queue", queue, "remote", r.RemoteAddr)
}

// queueFailed renders the queue's page with the error of action (its
// status's message, as the API words it) and the HTTP status the code
// maps to; the error page when the queue's page cannot be shown.
func (d *Dashboard) queueFailed(w http.ResponseWriter, r *http.Request, name, action string, err error) {
	d.renderQueue(w, r, httpCode(err), name, queueExtras{ActionErr: action + ": " + status.Convert(err).Message()})
}

// queuesFailed renders the queues page with the error of action and
// what the create form held.
func (d *Dashboard) queuesFailed(w http.ResponseWriter, r *http.Request, action string, err error) {
	d.renderQueues(w, r, httpCode(err), action+": "+status.Convert(err).Message())
}
