package broker

import "testing"

// TestFormatIDIsTheAPIForm: a hand-back sent to the leader names its
// leases as the API does, 16 hex digits (transport.FormatID).
func TestFormatIDIsTheAPIForm(t *testing.T) {
	for v, want := range map[uint64]string{0: "0000000000000000", 42: "000000000000002a", 1<<64 - 1: "ffffffffffffffff", 0x123<<20 | 7: "0000000012300007"} {
		if got := formatID(v); got != want {
			t.Errorf("formatID(%#x) = %s, want %s", v, got, want)
		}
	}
}
