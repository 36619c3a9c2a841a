package meta

import (
	"slices"
	"testing"
)

func TestVoterCount(t *testing.T) {
	for _, c := range []struct {
		setting       uint32
		members, want int
	}{
		{0, 1, 1}, {0, 2, 2}, {0, 3, 3}, {0, 4, 3}, {0, 5, 5}, {0, 9, 5},
		{3, 9, 3}, {1, 9, 1}, {7, 9, 7}, {7, 4, 4}, {5, 0, 0},
	} {
		if got := VoterCount(c.setting, c.members); got != c.want {
			t.Errorf("VoterCount(%d, %d) = %d, want %d", c.setting, c.members, got, c.want)
		}
	}
}

func TestMetaVoters(t *testing.T) {
	ms := func(pairs ...string) []Member {
		var out []Member
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, Member{NodeID: pairs[i], Zone: pairs[i+1]})
		}
		return out
	}
	nine := ms("n1", "a", "n2", "a", "n3", "a", "n4", "b", "n5", "b", "n6", "c", "n7", "c", "n8", "a", "n9", "b")
	for _, c := range []struct {
		name    string
		current []string
		members []Member
		setting uint32
		want    []string
	}{
		{"one node", nil, ms("n1", ""), 0, []string{"n1"}},
		{"three, no zones", nil, ms("n3", "", "n1", "", "n2", ""), 0, []string{"n1", "n2", "n3"}},
		{"nine nodes: five voters across zones", nil, nine, 0, []string{"n1", "n2", "n4", "n5", "n6"}},
		{"current voters kept", []string{"n9", "n8", "n7"}, nine, 3, []string{"n7", "n8", "n9"}},
		{"a lost voter replaced from the least used zone", []string{"n1", "n2", "gone"}, nine, 3, []string{"n1", "n2", "n4"}},
		{"too many current: first by id", []string{"n5", "n4", "n3", "n2", "n1"}, nine, 3, []string{"n1", "n2", "n3"}},
		{"growing to five keeps the three", []string{"n7", "n8", "n9"}, nine, 0, []string{"n1", "n4", "n7", "n8", "n9"}},
		{"duplicates in current", []string{"n1", "n1"}, ms("n1", "", "n2", ""), 0, []string{"n1", "n2"}},
	} {
		got := MetaVoters(c.current, c.members, c.setting)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		if again := MetaVoters(got, c.members, c.setting); !slices.Equal(again, got) {
			t.Errorf("%s: not stable: %v then %v", c.name, got, again)
		}
	}
}
