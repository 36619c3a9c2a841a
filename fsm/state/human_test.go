package state

import (
	"testing"
	"time"
)

func TestHumanUnits(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{HumanMs(250), "250ms"},
		{HumanMs(30_000), "30s"},
		{HumanMs(5_400_000), "1h30m"},
		{HumanMs(3_600_000), "1h"},
		{HumanMs(MaxDurationMs), "366 days"},
		{HumanMs(3_600_000_000_000), "41666.7 days"},
		{HumanMs(-1000), "-1s"},
		{HumanDuration(time.Minute), "1m"},
		{HumanDuration(time.Nanosecond), "1ns"},
		{HumanBytes(1), "1 byte"},
		{HumanBytes(512), "512 bytes"},
		{HumanBytes(1 << 20), "1 MiB"},
		{HumanBytes(MaxMessageBytesCap), "16 MiB"},
		{HumanBytes(100 << 20), "100 MiB"},
		{HumanBytes(100_000_000), "95.4 MiB"},
		{HumanBytes(1536), "1.5 KiB"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
