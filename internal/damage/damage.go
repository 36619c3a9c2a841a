// Package damage breaks files on purpose, for the tests of what a node
// does with a corrupt data dir: a bit flipped, a range zeroed.
package damage

import (
	"os"
	"testing"
)

// FlipBit flips one bit of the byte at off in path.
func FlipBit(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// ZeroRange overwrites n bytes of path at off with zeros.
func ZeroRange(t testing.TB, path string, off, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, n), off); err != nil {
		t.Fatal(err)
	}
}
