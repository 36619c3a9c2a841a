package test

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// redirectLeader returns leader_addr of a NOT_LEADER redirect, or "".
func redirectLeader(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.Reason == "NOT_LEADER" {
			return ei.Metadata["leader_addr"]
		}
	}
	return ""
}
