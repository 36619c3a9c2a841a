package logconv

import (
	"testing"
)

// TestFormatIDIsTheAPIForm: ids and lease tokens (and the leases a
// leases as the API does, 16 hex digits (FormatID).
func TestFormatIDIsTheAPIForm(t *testing.T) {
	for v, want := range map[uint64]string{0: "0000000000000000", 42: "000000000000002a", 1<<64 - 1: "ffffffffffffffff", 0x123<<20 | 7: "0000000012300007"} {
		if got := FormatID(v); got != want {
			t.Errorf("FormatID(%#x) = %s, want %s", v, got, want)
		}
	}
}
