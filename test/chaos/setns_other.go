//go:build linux && !amd64 && !arm64

package chaos

// sysSetns is unknown here: the latency proxy cannot enter namespaces.
const sysSetns = -1
