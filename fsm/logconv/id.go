package logconv

// FormatID renders a message id or lease token as the API shows it:
// fixed-width hex (16 digits), so string order is numeric order. The edge
// formats ids for clients with it, and the data group names leases with
// it when it sends a hand-back to the leader as an API call.
func FormatID(v uint64) string {
	var b [16]byte
	return string(AppendID(b[:0], v))
}

// AppendID appends FormatID(v) to dst, for callers that format many ids
// into one buffer.
func AppendID(dst []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
	return append(dst, b[:]...)
}
