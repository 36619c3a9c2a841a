package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
)

// Damage kinds: what Damage does to a file.
const (
	DamageFlip     = "flip"     // flip a few bits
	DamageZero     = "zero"     // zero a range
	DamageTruncate = "truncate" // cut the file short
)

// DamageKinds are the kinds Damage knows, for a seeded choice.
var DamageKinds = []string{DamageFlip, DamageZero, DamageTruncate}

// NewestSegment returns the newest wal segment file in a node's data
// dir ("" if it has none: a bolt data dir, or no log yet).
func NewestSegment(dataDir string) string {
	files, _ := filepath.Glob(filepath.Join(dataDir, "wal", "*.wal"))
	sort.Strings(files) // named by base index, then id, zero padded
	if len(files) == 0 {
		return ""
	}
	return files[len(files)-1]
}

// NewestSnapshotState returns the state file of the newest snapshot in a
// node's data dir ("" if it has none).
func NewestSnapshotState(dataDir string) string {
	files, _ := filepath.Glob(filepath.Join(dataDir, "snapshots", "*", "state.bin"))
	sort.Strings(files) // named term-index-time
	if len(files) == 0 {
		return ""
	}
	return files[len(files)-1]
}

// Damage changes path as a failing disk might, where a node's checks must
// find it: inside the data the file holds (a wal segment is allocated
// whole and zero past its data), and for a wal segment with committed
// entries after the damage (see raftlog/walverify.go: a cut at the very
// end of the log reads exactly as a write a crash tore, which the node
// rolls back by design). It returns what it did, for the test's log.
func Damage(path, kind string, rng *rand.Rand) (string, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	end, err := dataEnd(f)
	if err != nil {
		return "", err
	}
	// Leave the file header and the last 10% alone (see above).
	lo, hi := int64(64), end-end/10
	if hi-lo < 4096 {
		return "", fmt.Errorf("%s: only %d bytes of data, too few to damage", path, end)
	}
	pick := func() int64 { return lo + rng.Int64N(hi-lo) }
	switch kind {
	case DamageFlip:
		var offs []int64
		for range 1 + rng.IntN(3) {
			off := pick()
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, off); err != nil {
				return "", err
			}
			b[0] ^= 1 << rng.IntN(8)
			if _, err := f.WriteAt(b, off); err != nil {
				return "", err
			}
			offs = append(offs, off)
		}
		return fmt.Sprintf("flipped a bit at offsets %v of %s", offs, path), f.Sync()
	case DamageZero:
		for range 100 {
			off, n := pick(), int64(64+rng.IntN(4096))
			n = min(n, hi-off)
			b := make([]byte, n)
			if _, err := f.ReadAt(b, off); err != nil {
				return "", err
			}
			if bytes.Count(b, []byte{0}) == len(b) {
				continue // zeros already: zeroing them changes nothing
			}
			if _, err := f.WriteAt(make([]byte, n), off); err != nil {
				return "", err
			}
			return fmt.Sprintf("zeroed %d bytes at offset %d of %s", n, off, path), f.Sync()
		}
		return "", fmt.Errorf("%s: found no range holding data to zero", path)
	case DamageTruncate:
		off := lo + (hi-lo)/4 + rng.Int64N((hi-lo)/2)
		if err := f.Truncate(off); err != nil {
			return "", err
		}
		return fmt.Sprintf("cut %s to %d bytes (it held %d of data)", path, off, end), f.Sync()
	}
	return "", fmt.Errorf("damage kind %q: want one of %v", kind, DamageKinds)
}

// dataEnd is the offset past the last non-zero byte of f.
func dataEnd(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 1<<20)
	for end := fi.Size(); end > 0; {
		start := max(0, end-int64(len(buf)))
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		for i := n - 1; i >= 0; i-- {
			if buf[i] != 0 {
				return start + int64(i) + 1, nil
			}
		}
		end = start
	}
	return 0, nil
}
