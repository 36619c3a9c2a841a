package logconv

import (
	"bytes"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestDescriptorsMatch: each log-format copy has exactly the API message's
// fields (name, number, kind, cardinality), so entries and snapshots that
// embedded the API messages decode to the same values, and an API field
// added later fails here until the log format decides what to do with it.
func TestDescriptorsMatch(t *testing.T) {
	for _, tc := range []struct{ api, log proto.Message }{
		{&raftqv1.QueueConfig{}, &fsmv1.QueueConfig{}},
		{&raftqv1.ThrottleRule{}, &fsmv1.ThrottleRule{}},
		{&raftqv1.EnqueueMessage{}, &fsmv1.EnqueueMessage{}},
		{&raftqv1.RetryPolicy{}, &fsmv1.RetryPolicy{}},
	} {
		a, l := tc.api.ProtoReflect().Descriptor(), tc.log.ProtoReflect().Descriptor()
		if a.Fields().Len() != l.Fields().Len() {
			t.Fatalf("%s has %d fields, %s has %d", a.FullName(), a.Fields().Len(), l.FullName(), l.Fields().Len())
		}
		for i := range a.Fields().Len() {
			af := a.Fields().Get(i)
			lf := l.Fields().ByNumber(af.Number())
			if lf == nil {
				t.Fatalf("%s: field %d (%s) missing from %s", a.FullName(), af.Number(), af.Name(), l.FullName())
			}
			if af.Name() != lf.Name() || af.Kind() != lf.Kind() || af.Cardinality() != lf.Cardinality() || af.IsMap() != lf.IsMap() {
				t.Fatalf("%s.%s differs from %s.%s", a.FullName(), af.Name(), l.FullName(), lf.Name())
			}
			if af.IsMap() && (af.MapValue().Kind() != lf.MapValue().Kind() || af.MapKey().Kind() != lf.MapKey().Kind()) {
				t.Fatalf("%s.%s map types differ", a.FullName(), af.Name())
			}
			if af.Kind() == protoreflect.MessageKind && !af.IsMap() && af.Message().FullName() != "raftq.v1.RetryPolicy" {
				t.Fatalf("%s.%s: nested message fields need their own copy and check", a.FullName(), af.Name())
			}
		}
	}
}

func fullConfig() *raftqv1.QueueConfig {
	return &raftqv1.QueueConfig{
		VisibilityTimeoutMs: 1, MaxDeliveries: 2, DeadLetterQueue: "d", MaxDepth: 4, MaxBytes: 5,
		MessageTtlMs: 6, DedupWindowMs: 7, MaxMessageBytes: 9, FairnessQuantum: 10,
		ConcurrencyLimit: 11, ConcurrencyLimits: map[string]int32{"t": 2, "u": 0},
		Retry:     &raftqv1.RetryPolicy{InitialDelayMs: 1000, MaxDelayMs: 300_000, Multiplier: 2, Jitter: 0.2},
		Throttles: map[string]*raftqv1.ThrottleRule{"a": {RatePerSec: 1.5, Burst: 3}, "b": {RatePerSec: 0.25}},
	}
}

func fullMessage() *raftqv1.EnqueueMessage {
	return &raftqv1.EnqueueMessage{
		Payload: []byte("p"), Headers: map[string]string{"h": "v", "i": "w"}, Priority: -3, FairnessKey: "k",
		Weight: 5, ThrottleKeys: []string{"a", "b"}, DelayMs: 7, DedupId: "d", TtlMs: 9, ConcurrencyKey: "c",
	}
}

// TestConversionsAreWireIdentical: converting writes exactly the bytes the
// API message would have, in both directions.
func TestConversionsAreWireIdentical(t *testing.T) {
	det := proto.MarshalOptions{Deterministic: true}
	cases := []struct {
		name      string
		api, conv proto.Message
		back      proto.Message
	}{
		{"config", fullConfig(), QueueConfig(fullConfig()), APIQueueConfig(QueueConfig(fullConfig()))},
		{"empty config", &raftqv1.QueueConfig{}, QueueConfig(&raftqv1.QueueConfig{}), APIQueueConfig(&fsmv1.QueueConfig{})},
		{"message", fullMessage(), EnqueueMessage(fullMessage()), nil},
		{"message in batch", fullMessage(), EnqueueMessages([]*raftqv1.EnqueueMessage{nil, fullMessage()})[1], nil},
	}
	for _, tc := range cases {
		want, err := det.Marshal(tc.api)
		if err != nil {
			t.Fatal(err)
		}
		got, err := det.Marshal(tc.conv)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("%s: converted bytes %x, API bytes %x", tc.name, got, want)
		}
		if tc.back != nil && !proto.Equal(tc.back, tc.api) {
			t.Errorf("%s: round trip gave %v, want %v", tc.name, tc.back, tc.api)
		}
	}
	if QueueConfig(nil) != nil || APIQueueConfig(nil) != nil || EnqueueMessage(nil) != nil || EnqueueMessages(nil) != nil {
		t.Error("nil did not convert to nil")
	}
	if ms := EnqueueMessages([]*raftqv1.EnqueueMessage{nil}); len(ms) != 1 || ms[0] != nil {
		t.Errorf("a nil message converted to %v", ms)
	}
}

// TestConfigCopyIsIndependent: changing the converted rules leaves the
// request's alone (stored configs are cloned and filled with defaults).
func TestConfigCopyIsIndependent(t *testing.T) {
	api := fullConfig()
	c := QueueConfig(api)
	c.Throttles["a"].Burst = 99
	if api.Throttles["a"].Burst != 3 {
		t.Fatal("converted config shares throttle rules with the request")
	}
}
