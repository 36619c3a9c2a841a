package state

import "testing"

func TestMatchPattern(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"jobs", "jobs", true},
		{"jobs", "jobs2", false},
		{"jobs.*", "jobs.a", true},
		{"jobs.*", "jobs.a.b.dlq", true},
		{"jobs.*", "jobs.", true},
		{"jobs.*", "jobs", false},
		{"*", "anything", true},
		{"*.dlq", "q.dlq", true},
		{"*.dlq", "q.dlqx", false},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"a*a", "aaaa", true},
		{"**", "x", true},
		{"j?bs", "jobs", false}, // no other wildcard
	} {
		if got := MatchPattern(c.pattern, c.name); got != c.want {
			t.Errorf("MatchPattern(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

func TestValidateAuthNames(t *testing.T) {
	for _, ok := range []string{"alice", "ci-bot_1", "svc@example.com", "a.b"} {
		if err := ValidateIdentity(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", "a/b", "a*", string(make([]byte, 129))} {
		if ValidateIdentity(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if ValidatePattern("jobs.*") != nil || ValidatePattern("") == nil || ValidatePattern("a b") == nil {
		t.Error("pattern validation")
	}
}
