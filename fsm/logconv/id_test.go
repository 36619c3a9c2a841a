package logconv

import "testing"

// TestFormatIDIsTheAPIForm: message ids and lease tokens, as clients see
// them and as a hand-back names its leases to the leader, are 16 hex
// digits, zero-padded.
func TestFormatIDIsTheAPIForm(t *testing.T) {
	for v, want := range map[uint64]string{0: "0000000000000000", 42: "000000000000002a", 1<<64 - 1: "ffffffffffffffff", 0x123<<20 | 7: "0000000012300007"} {
		if got := FormatID(v); got != want {
			t.Errorf("FormatID(%#x) = %s, want %s", v, got, want)
		}
	}
}

// TestAppendIDIsFormatID: AppendID appends exactly FormatID's form, after
// what dst holds.
func TestAppendIDIsFormatID(t *testing.T) {
	dst := []byte("x")
	for _, v := range []uint64{0, 42, 1<<64 - 1, 0x123<<20 | 7} {
		dst = AppendID(dst, v)
	}
	if want := "x" + FormatID(0) + FormatID(42) + FormatID(1<<64-1) + FormatID(0x123<<20|7); string(dst) != want {
		t.Errorf("AppendID = %s, want %s", dst, want)
	}
}
