package state

// MaxLogVersion is the newest log version this build applies. Version 1 is
// the format before versioning (entries carry no version); version 2 adds
// only SetClusterVersion. fsm/DESIGN.md lists every version; a rule that
// changes in version N is written `if tx.version >= N`.
const MaxLogVersion uint32 = 2
