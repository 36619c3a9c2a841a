package tlsconfig

import "encoding/pem"

// nextPEMCert returns the DER of the next CERTIFICATE block in b (skipping
// other blocks) and what follows it; nil when there is none.
func nextPEMCert(b []byte) (der, rest []byte) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, nil
		}
		if blk.Type == "CERTIFICATE" {
			return blk.Bytes, b
		}
	}
}
