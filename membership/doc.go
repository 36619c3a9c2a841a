// Package membership is a node's gossip membership (hashicorp/memberlist):
// the metadata it advertises (Meta: addresses, Raft state, log version,
// cluster id, disk and corruption flags, the Raft port's preambles), the
// table of the members it has heard of with their history and its change
// feed (Records, Changes), joining the seeds and re-joining failed
// members, and the gossip half of a graceful leave. It decides nothing
// about Raft: package cluster reads it to bootstrap, reconcile and admit.
package membership
