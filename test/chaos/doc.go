// Package chaos is raftq's chaos harness: it runs a cluster of the real
// binary with every node in its own network namespace (its own IP address,
// a Linux bridge between them), drives producers and consumers through the
// Go client while a seeded nemesis kills, pauses, partitions, slows and
// restarts nodes, then heals the cluster, drains every queue and hands the
// recorded history to a checker of the invariants in DESIGN.md ("Invariants
// the checker holds").
//
// The checker (checker.go) is pure code over a History and is unit-tested
// with synthetic histories. Everything else needs root, ip and iptables;
// without them the tests skip and say why. RAFTQ_CHAOS_SEED replays a run's
// fault schedule; see DESIGN.md in this folder for the choices made.
package chaos
