package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/protobuf/encoding/protodelim"
)

// writeBackupFile writes an intact backup file (framing and checksum
// right) holding info and data.
func writeBackupFile(t *testing.T, info *raftqv1.BackupInfo, data []byte) string {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(backupMagic)
	sum := sha256.Sum256(data)
	for _, rec := range []*raftqv1.BackupChunk{{Info: info}, {Data: data}, {Sha256: hex.EncodeToString(sum[:]), Size: int64(len(data))}} {
		if _, err := protodelim.MarshalTo(&b, rec); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(t.TempDir(), "newer.bak")
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRestoreRefusesANewerBackup: an intact backup from a newer raftq (a
// cluster at a log version this build does not apply, or a snapshot
// format it does not read) is refused with a message that says to use a
// newer raftq, and no data dir is made.
func TestRestoreRefusesANewerBackup(t *testing.T) {
	header := func(h *fsmv1.SnapshotHeader) []byte {
		var b bytes.Buffer
		if _, err := protodelim.MarshalTo(&b, h); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	for _, tc := range []struct {
		name string
		info *raftqv1.BackupInfo
		data []byte
		want []string
	}{
		{"newer log version", &raftqv1.BackupInfo{Index: 9, Term: 2, ClusterVersion: fsm.MaxLogVersion + 1},
			header(&fsmv1.SnapshotHeader{Version: 2, ClusterVersion: fsm.MaxLogVersion + 1}),
			[]string{fmt.Sprint("log version ", fsm.MaxLogVersion+1), "newer raftq"}},
		{"newer snapshot format", &raftqv1.BackupInfo{Index: 9, Term: 2, ClusterVersion: fsm.MaxLogVersion},
			header(&fsmv1.SnapshotHeader{Version: 99, ClusterVersion: fsm.MaxLogVersion}),
			[]string{"format version 99", "upgrade"}},
		{"another group", &raftqv1.BackupInfo{Index: 9, Term: 2, ClusterVersion: fsm.MaxLogVersion, Group: "g7"},
			header(&fsmv1.SnapshotHeader{Version: 2, ClusterVersion: fsm.MaxLogVersion}),
			[]string{`group "g7"`, `only group "data"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := writeBackupFile(t, tc.info, tc.data)
			dir := filepath.Join(t.TempDir(), "restored")
			r := raftq(t, "127.0.0.1:1", "", "backup", "restore", file, "--data-dir", dir, "--node-id", "n1")
			if r.code == 0 {
				t.Fatalf("a newer backup was restored: %q", r.stdout)
			}
			for _, want := range tc.want {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("the refusal does not say %q: %s", want, r.stderr)
				}
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("a refused restore left the data dir: %v", err)
			}
		})
	}
}
