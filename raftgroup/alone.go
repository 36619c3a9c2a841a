package raftgroup

import (
	"log/slog"

	"github.com/hashicorp/raft"
)

// campaignAlone makes a node that is the only voter of its Raft
// configuration stand for election at once, instead of after a heartbeat
// timeout (1–2 × HeartbeatTimeout with hashicorp/raft's jitter) with no
// leader to hear from: nobody else can lead, so waiting only delays the
// restart. etcd fast-forwards its election ticks and swarmkit campaigns
// for the same case; hashicorp/raft has neither, but a follower restarts
// its heartbeat timer at zero when ReloadConfig lowers HeartbeatTimeout.
// So the timeouts are raised by a nanosecond and set back: the second
// reload lowers them to their configured values and wakes the follower,
// whose timer then fires at once, finds no leader contact and starts the
// election, which its own vote wins. Timeouts end as configured.
//
// Nothing changes for a node that shares its configuration with another
// voter (it waits as before), nor for one with no configuration (it has
// nothing to campaign in, and the vote guard in novote.go is untouched:
// it decides what this node grants others, not when it stands).
func campaignAlone(r *raft.Raft, self raft.ServerID, log *slog.Logger) {
	f := r.GetConfiguration()
	if err := f.Error(); err != nil || !aloneVoter(f.Configuration(), self) {
		return
	}
	rc := r.ReloadableConfig()
	up := rc
	up.HeartbeatTimeout++
	up.ElectionTimeout++
	if err := r.ReloadConfig(up); err != nil {
		log.Warn("the only voter could not stand for election at once; it waits a heartbeat timeout", "err", err)
		return
	}
	if err := r.ReloadConfig(rc); err != nil {
		log.Error("restoring the Raft timeouts", "err", err)
		return
	}
	log.Info("the only voter of the configuration: standing for election at once")
}

// aloneVoter reports whether self is the one voter of conf.
func aloneVoter(conf raft.Configuration, self raft.ServerID) bool {
	voters, me := 0, false
	for _, s := range conf.Servers {
		if s.Suffrage == raft.Voter {
			voters++
			me = me || s.ID == self
		}
	}
	return voters == 1 && me
}
