package workload

import "testing"

func TestParseLoadAverage(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"3.10 2.80 2.50 4/812 12345\n", "3.10 2.80 2.50", true},
		{"0.00 0.01 0.05 1/1 1", "0.00 0.01 0.05", true},
		{"3.10 2.80", "", false},
		{"x 2.80 2.50 1/1 1", "", false},
		{"", "", false},
	} {
		got, err := parseLoadAverage(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseLoadAverage(%q) = %q, %v; want %q, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if _, err := LoadAverage(); err != nil {
		t.Errorf("LoadAverage of this machine: %v", err)
	}
}
