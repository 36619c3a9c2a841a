package fsm

import (
	"fmt"

	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// apply hands one decoded entry to the state store, by the rules of the
// entry's own log version: a command introduced in version N is recognised
// only in entries of version >= N, exactly as older builds saw them.
// Called with the write lock held.
func (f *FSM) apply(index, term uint64, cmd *fsmv1.Command, touched *state.Touched) Result {
	version := entryVersion(cmd)
	begin := f.store.Begin
	if _, ok := cmd.Op.(*fsmv1.Command_Tick); ok {
		begin = f.store.BeginTick // a Tick's work is the sweep: a bigger budget
	}
	tx := begin(index, term, version, cmd.NowMs, touched)
	switch op := cmd.Op.(type) {
	case *fsmv1.Command_CreateQueue:
		return tx.CreateQueue(op.CreateQueue)
	case *fsmv1.Command_UpdateQueue:
		return tx.UpdateQueue(op.UpdateQueue)
	case *fsmv1.Command_DeleteQueue:
		return tx.DeleteQueue(op.DeleteQueue)
	case *fsmv1.Command_PurgeQueue:
		return tx.PurgeQueue(op.PurgeQueue)
	case *fsmv1.Command_Enqueue:
		return tx.Enqueue(op.Enqueue)
	case *fsmv1.Command_LeaseGrant:
		return tx.Grant(op.LeaseGrant)
	case *fsmv1.Command_LeaseRollback:
		return tx.Rollback(op.LeaseRollback.GetRefs())
	case *fsmv1.Command_Ack:
		if version >= state.AckGrantVersion && len(op.Ack.GetGrants()) > 0 {
			return tx.AckGrant(op.Ack)
		}
		// Before version 10 an Ack's grants are ignored, as older
		// builds ignore the field.
		return tx.Ack(op.Ack.GetRefs())
	case *fsmv1.Command_Nack:
		return tx.Nack(op.Nack)
	case *fsmv1.Command_Extend:
		return tx.Extend(op.Extend)
	case *fsmv1.Command_LeaseExpire:
		return tx.Expire(op.LeaseExpire)
	case *fsmv1.Command_ReleaseConsumer:
		return tx.ReleaseConsumer(op.ReleaseConsumer)
	case *fsmv1.Command_Redrive:
		return tx.Redrive(op.Redrive)
	case *fsmv1.Command_Tick:
		return &Done{} // Begin already let time pass
	case *fsmv1.Command_Checkpoint:
		fr := f.store.Freeze(index)
		f.checkpoints.add(index, fr)
		return &CheckpointResult{Index: index, Term: term, Frozen: fr}
	case *fsmv1.Command_SetClusterVersion:
		if version < 2 {
			// Version 1 has no such command: a version-1 build read it
			// as an empty command, and so must this one.
			break
		}
		return tx.SetClusterVersion(op.SetClusterVersion)
	case *fsmv1.Command_CreateToken:
		if version < state.AuthVersion {
			break // unknown before version 5, as older builds saw it
		}
		return tx.CreateToken(op.CreateToken)
	case *fsmv1.Command_RevokeToken:
		if version < state.AuthVersion {
			break
		}
		return tx.RevokeToken(op.RevokeToken)
	case *fsmv1.Command_AuthGrant:
		if version < state.AuthVersion {
			break
		}
		return tx.AuthGrant(op.AuthGrant)
	case *fsmv1.Command_AuthUngrant:
		if version < state.AuthVersion {
			break
		}
		return tx.AuthUngrant(op.AuthUngrant)
	case *fsmv1.Command_RecountQueues:
		if version < state.RecountVersion {
			break // unknown before version 8, as older builds saw it
		}
		res := tx.RecountQueues(op.RecountQueues)
		f.noteRepairs(res)
		return res
	case *fsmv1.Command_RedriveStep:
		if version < state.RedriveVersion {
			break // unknown before its version, as older builds saw it
		}
		return tx.RedriveStep(op.RedriveStep)
	case *fsmv1.Command_SetClusterSettings:
		if version < state.AdmitVersion {
			break // unknown before version 9, as older builds saw it
		}
		return tx.SetClusterSettings(op.SetClusterSettings)
	case *fsmv1.Command_PauseQueue:
		if version < state.PauseVersion {
			break // unknown before PauseVersion, as older builds saw it
		}
		return tx.PauseQueue(op.PauseQueue)
	case *fsmv1.Command_ResumeQueue:
		if version < state.PauseVersion {
			break
		}
		return tx.ResumeQueue(op.ResumeQueue)
	}
	return failed(fmt.Errorf("%w: empty or unknown command", ErrInvalid))
}
