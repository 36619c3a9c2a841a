package harness

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Tree returns pid and all its descendants, read from /proc (pid first,
// then breadth first).
func Tree(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		_, ppid, ok := stat(p)
		if !ok {
			continue // exited meanwhile
		}
		children[ppid] = append(children[ppid], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out, nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	state, _, ok := stat(pid)
	return ok && state != "Z"
}

// stat reads the state and parent of pid from /proc/<pid>/stat, whose
// command name (in parentheses) may hold spaces and parentheses.
func stat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0], ppid, err == nil
}
