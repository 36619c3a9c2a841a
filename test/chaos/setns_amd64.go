//go:build linux

package chaos

// sysSetns is setns(2) on linux/amd64 (the syscall package lacks it).
const sysSetns = 308
