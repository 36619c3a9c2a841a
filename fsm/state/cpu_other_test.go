//go:build !unix

package state

import (
	"testing"
	"time"
)

// processCPU is unknown here: BenchmarkRestore's cpu-ns/msg reads 0.
func processCPU(testing.TB) time.Duration { return 0 }
