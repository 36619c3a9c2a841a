package cluster

import (
	"testing"
)

func TestVoterDisksCanStore(t *testing.T) {
	for _, tc := range []struct {
		voters, low int
		want        bool
	}{
		{1, 0, true}, {1, 1, false}, {3, 1, true}, {3, 2, false}, {5, 2, true}, {5, 3, false}, {0, 0, true},
	} {
		v := VoterDisks{Voters: tc.voters, Low: make([]string, tc.low)}
		if got := v.CanStore(); got != tc.want {
			t.Errorf("%d voters, %d low: CanStore %t, want %t", tc.voters, tc.low, got, tc.want)
		}
	}
}
